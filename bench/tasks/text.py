"""Text helpers the example judges share: the question inside whatever form a prompt reaches a reward function
in, and words."""
from __future__ import annotations

import re

WORD = re.compile(r"[A-Za-z0-9]+(?:['’][A-Za-z]+)?")
# A chat-templated query (ChatML, as SmolLM2's template writes it): the user's turn between these markers.
CHATML_USER = re.compile(r"<\|im_start\|>user\s*(.*?)<\|im_end\|>", re.S)


def prompt_text(prompt) -> str:
    """The user's question: a prompt is its text, a conversation (a list of {role, content}: the last user turn),
    or a ChatML-templated query (the last user turn inside it)."""
    if isinstance(prompt, (list, tuple)):
        users = [m.get("content", "") for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
        return str(users[-1]) if users else ""
    text = str(prompt or "")
    turns = CHATML_USER.findall(text)
    return turns[-1].strip() if turns else text


def words(text: str) -> list[str]:
    return WORD.findall(text or "")


def check_lengths(prompts, answers) -> None:
    if len(prompts) != len(answers):
        raise ValueError(f"judge: {len(prompts)} prompts but {len(answers)} answers; give one prompt per answer")
