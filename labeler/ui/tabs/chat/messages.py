"""The Chatbot's messages: each answer shown with the name of the model that wrote it, and the plain history
(without those names) that the model reads and a rating stores."""
from __future__ import annotations

import html
import re

# Each answer names the model that wrote it: a small line above the text, in the Chatbot's
# message only. plain_history takes it off again, so the model never reads it and a rating stores the answer alone.
ANSWERED_BY = "<sub>answered by {model}</sub>\n\n"
_ANSWERED_BY = re.compile(r"\A<sub>answered by [^<]*</sub>\n\n")


def answered_by(model: str, answer: str) -> str:
    """The answer as the Chatbot shows it: the model's name above the text."""
    return ANSWERED_BY.format(model=html.escape(model)) + answer


def text_of(content) -> str:
    """A Chatbot message's content as plain text (Gradio 6 sends a list of parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, dict):
        return str(content.get("text") or "")
    if isinstance(content, (list, tuple)):
        return "".join(text_of(part) for part in content)
    return ""


def plain_history(history) -> list[dict]:
    return [{"role": m["role"], "content": _ANSWERED_BY.sub("", text_of(m["content"]), count=1)
             if m["role"] == "assistant" else text_of(m["content"])}
            for m in history or [] if m.get("role") in ("user", "assistant")]
