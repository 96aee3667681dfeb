"""The registry's models as a dropdown offers them, for the Chat tab's pickers and the Arena's."""
from __future__ import annotations

from labeler.services import models
from labeler.ui.context import UIContext


def model_choices(ctx: UIContext, db, kind: str = "chat") -> tuple[list[str], str | None]:
    """(choices, default) for a model dropdown; the server's --model is offered even when unregistered."""
    if kind == "reward":
        names = [m["name"] for m in models.list_models(db, kind="reward")]
        return names, (names[-1] if names else None)
    names = models.chat_model_names(db)
    default = ctx.settings.model
    if default not in names:
        names.append(default)
    return names, default
