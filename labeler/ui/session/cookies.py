"""The login cookie as Gradio sets it, rewritten on the way out (RequestGuard sends every response through
`lax_cookies`)."""
from __future__ import annotations


async def lax_cookies(send, tls: bool, message) -> None:
    """Rewrite `SameSite=None` (Gradio's login cookie) to `SameSite=Lax`: a cross-site request then carries
    no login, while following a link to the app from elsewhere still does. Over TLS, leave out the
    `access-token-unsecure-` twin Gradio sets without `Secure` for plain-HTTP servers: over HTTPS the browser
    has the Secure one, and the twin would also travel over any plain-HTTP request to the same host."""
    if message["type"] == "http.response.start":
        headers = []
        for name, value in message.get("headers", []):
            if name.lower() == b"set-cookie":
                if tls and value.startswith(b"access-token-unsecure-") and b"Max-Age=0" not in value:
                    continue
                value = value.replace(b"SameSite=none", b"SameSite=lax").replace(b"SameSite=None", b"SameSite=lax")
            headers.append((name, value))
        message = {**message, "headers": headers}
    await send(message)
