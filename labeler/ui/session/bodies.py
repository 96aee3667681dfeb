"""A request body read ahead by the guard (at most its size limit), so that what Gradio would act on before any
handler runs is checked first: a file named by URL."""
from __future__ import annotations

import json

async def read_body(receive, limit: int) -> bytes | None:
    """The whole request body, or None once it passes `limit` bytes (or the client went away)."""
    chunks, size, more = [], 0, True
    while more:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        more = message.get("more_body", False)
    return b"".join(chunks)


def replay(body: bytes, receive):
    """`receive` for the app: the body read already, then the client's own messages (a disconnect)."""
    sent = [False]

    async def replayed():
        if not sent[0]:
            sent[0] = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


def file_urls(body: bytes) -> list[str]:
    """The URLs named as a Gradio FileData's path in a JSON body: Gradio fetches such a file (resolving its host)
    while it prepares an event's inputs, before any handler checks the caller's role. Parsed, not searched for,
    since JSON may spell "gradio.FileData" with escapes."""
    if not body.lstrip()[:1] in (b"{", b"["):
        return []
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return []  # not JSON Gradio could read either
    found, stack = [], [data]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            meta, path = value.get("meta"), value.get("path")
            if (isinstance(meta, dict) and meta.get("_type") == "gradio.FileData" and isinstance(path, str)
                    and path.strip().lower().startswith(("http://", "https://", "//"))):
                found.append(path)
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return found
