"""The registry's models as a dropdown offers them, for the Chat tab's pickers and the Arena's, and the judges an
online DPO run may have (the Train tab's Judge picker)."""
from __future__ import annotations

from labeler.services.serving import models
from labeler.services.settings import reward_spec
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


def judge_choices(reward_models: list[str]) -> list[tuple[str, str]]:
    """The judges an online DPO run may have, as (words, the `judge` setting `train online-dpo --set judge=` takes):
    people, people with the online reward model, the newest reward model, each of `reward_models` (registry names,
    oldest first, as models.list_models gives them; listed newest first) and the built-in scoring functions. Never
    a module:function: that names code to import, which only the command line may (the picker takes a typed value,
    and the launch refuses one that names code, as it does the Reward picker's)."""
    newest = f" ({reward_models[-1]})" if reward_models else " (none registered yet)"
    return [("People (blind pairs in the Rank tab)", "people"),
            ("Mix (people where the reward model is least sure)", "mix"),
            (f"The newest reward model{newest}", "rm"),
            *((f"Reward model {name}", f"rm:{name}") for name in reversed(reward_models)),
            *((reward_spec.CHOICE_LABELS[name], name) for name in reward_spec.BUILTIN_FUNCTIONS)]


def registered_judges(db) -> list[tuple[str, str]]:
    """judge_choices for the reward models registered now."""
    return judge_choices([m["name"] for m in models.list_models(db, kind="reward")])
