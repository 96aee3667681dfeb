"""Admin tab: accounts, the project's labelling settings, annotator quality, gold items, backup.

Every handler is decorated @requires(ctx, "admin"): the tab is hidden from annotators, but its endpoints are
not, so the role check is the only thing that counts.
"""
from __future__ import annotations

import json
import time

import gradio as gr

from labeler.services.errors import InputError
from labeler.services.projects import PROMPT_FORMATS, SELECTIONS
from labeler.ui import downloads
from labeler.ui.context import UIContext
from labeler.ui.roles import requires
from labeler.ui.session import quiet_on_load
from labeler.ui.soft_errors import keep_on_error

TITLE = "Admin"
USER_HEADERS = ["username", "role", "active"]
MODEL_HEADERS = ["name", "kind", "base_model", "run_id", "created_at"]
STATS_COLUMNS = ["username", "ratings", "rankings", "skipped", "gold_items", "gold_accuracy", "mean_seconds"]


def parse_gold(text: str) -> dict | None:
    """The gold answer typed by an admin: '5' for a rating, '3 > 1 = 2' (best first, = ties) or JSON.

    '3 > 1 = 2' means response 3 is best, 1 and 2 tie below it: {"order": [[3], [1, 2]]}. Blank clears.
    """
    text = (text or "").strip()
    if not text:
        return None
    if text.startswith("{"):
        try:
            gold = json.loads(text)
        except json.JSONDecodeError as error:
            raise InputError(f"not valid JSON: {error.msg}", field="gold") from None
        if not isinstance(gold, dict):
            raise InputError("expected a JSON object like {\"score\": 5}", field="gold")
        return gold
    if ">" not in text and "=" not in text:
        try:
            return {"score": float(text) if "." in text else int(text)}
        except ValueError:
            raise InputError(f"{text!r} is neither a score nor an order like '3 > 1 = 2'", field="gold") from None
    order = []
    for group in text.split(">"):
        try:
            ids = [int(part) for part in group.split("=")]
        except ValueError:
            raise InputError(f"{group.strip()!r}: response ids must be whole numbers", field="gold") from None
        order.append(ids)
    return {"order": order}


def users_table(db) -> list[list]:
    from labeler.services import accounts

    return [[u.username, u.role, "yes" if u.active else "no"] for u in accounts.list_users(db)]


def stats_table(db, project: str) -> list[list]:
    from labeler.services import quality

    rows = []
    for stat in quality.annotator_stats(db, project):
        row = []
        for column in STATS_COLUMNS:
            value = stat.get(column)
            row.append(round(value, 3) if isinstance(value, float) else value)
        rows.append(row)
    return rows


def agreement_markdown(db, project: str) -> str:
    from labeler.services import quality

    result = quality.agreement(db, project)

    def fmt(value) -> str:
        return "n/a" if value is None else f"{value:.3f}"

    return (
        f"**Ratings**: Krippendorff's alpha (ordinal) = **{fmt(result.get('ratings_alpha'))}** over "
        f"{result.get('ratings_items', 0)} items rated by 2+ people.  \n"
        f"**Rankings**: pairwise agreement = **{fmt(result.get('rankings_pairwise'))}** over "
        f"{result.get('rankings_comparisons', 0)} comparisons on {result.get('rankings_items', 0)} items."
    )


def models_outputs(db) -> tuple[list[list], dict]:
    """The registry table and the base-model choices."""
    from labeler.services import models

    listed = models.list_models(db)
    table = [[m[h] if m[h] is not None else "" for h in MODEL_HEADERS] for m in listed]
    return table, gr.update(choices=["", *[m["name"] for m in listed if m["kind"] != "reward"]])


def item_preview(db, item_id: int) -> str:
    from labeler.services import labeling

    item = labeling.item_detail(db, item_id)
    lines = [f"**{item['kind']} item {item_id}**, prompt: {item['prompt'][:300]}"]
    lines += [f"- response **{response_id}**: {text[:200]}" for response_id, text in item["responses"]]
    lines.append(f"\nGold now: `{item['gold_json'] or 'none'}`")
    if item["selection_reason"]:
        lines.append(f"\nWhy the queue serves it here: {item['selection_reason']}.")
    return "\n".join(lines)


def build(ctx: UIContext) -> None:
    with gr.Accordion("Users", open=True):
        users = gr.Dataframe(headers=USER_HEADERS, interactive=False, label="Accounts", elem_id="admin-users")
        with gr.Row():
            new_name = gr.Textbox(label="Username", elem_id="admin-new-username")
            new_password = gr.Textbox(label="Password (8+ characters)", type="password")
            new_role = gr.Radio(["annotator", "admin"], value="annotator", label="Role")
            add_user = gr.Button("Add user", variant="primary", elem_id="admin-add-user")
        with gr.Row():
            who = gr.Dropdown(choices=[], label="User")
            reset_password = gr.Textbox(label="New password", type="password")
            set_password = gr.Button("Set password")
            toggle_active = gr.Button("Activate / deactivate")
            toggle_role = gr.Button("Make admin / annotator")

    with gr.Accordion("Project settings", open=True):
        with gr.Row():
            likert_min = gr.Number(precision=0, label="Lowest score", elem_id="admin-likert-min")
            likert_max = gr.Number(precision=0, label="Highest score")
            overlap = gr.Number(precision=0, minimum=1, label="Annotators per item (overlap)")
            prompt_format = gr.Dropdown(
                choices=[(f"{name}: {text}", name) for name, text in PROMPT_FORMATS.items()],
                label="Prompt format (generation, training and evaluation)", elem_id="admin-prompt-format",
            )
            selection = gr.Dropdown(
                choices=[(f"{name}: {text}", name) for name, text in SELECTIONS.items()],
                label="Queue order (which item annotators get next)", elem_id="admin-selection",
            )
        # The text annotators see, per label kind (projects.Project.guidelines_for): the default in full while
        # the project has none of its own, so what is here is what Rate and Rank show.
        with gr.Row():
            guidelines = gr.Textbox(
                label="Rating guidelines (Markdown, shown beside every item in Rate)", lines=8,
                info="Empty, or left as the default text: annotators see the default.", elem_id="admin-guidelines",
            )
            ranking_guidelines = gr.Textbox(
                label="Ranking guidelines (Markdown, shown beside every item in Rank)", lines=8,
                info="Empty, or left as the default text: annotators see the default.",
                elem_id="admin-ranking-guidelines",
            )
        save_project = gr.Button("Save settings", variant="primary", elem_id="admin-save-project")

    with gr.Accordion("Quality", open=True):
        stats = gr.Dataframe(headers=STATS_COLUMNS, interactive=False, label="Per annotator")
        agreement = gr.Markdown()
        with gr.Row():
            gold_item = gr.Number(precision=0, label="Item id")
            gold_value = gr.Textbox(label="Gold answer", info="rating: a score, e.g. 6; ranking: '3 > 1 = 2'; blank clears")
            show_item = gr.Button("Show item")
            mark_gold = gr.Button("Mark gold", elem_id="admin-mark-gold")
        gold_preview = gr.Markdown()

    with gr.Accordion("Models", open=False):
        gr.Markdown(
            "Chat models for **Generate**, **Chat** and the **Arena** (which needs two). Finished SFT, DPO and PPO "
            "runs register theirs; register another policy here from a folder on the server holding safetensors "
            "weights (hub ids and reward models: `rlhf-studio models add`)."
        )
        models_table = gr.Dataframe(headers=MODEL_HEADERS, interactive=False, label="Registered models",
                                    elem_id="admin-models")
        with gr.Row():
            model_name = gr.Textbox(label="Name", elem_id="admin-model-name")
            model_path = gr.Textbox(label="Folder on the server", elem_id="admin-model-path")
            model_base = gr.Dropdown(choices=[], label="Base model (optional: the KL reference)", elem_id="admin-model-base")
            register_model = gr.Button("Register policy", elem_id="admin-register-model")
        with gr.Row():  # `rlhf-studio models merge`: an SFT/DPO run with lora=true registers an adapter
            merge_name = gr.Textbox(label="LoRA adapter to merge into a full model (its registry name)",
                                    elem_id="admin-merge-name")
            merge_adapter = gr.Button("Merge adapter", elem_id="admin-merge-adapter")

    with gr.Accordion("Backup", open=False):
        backup_button = gr.Button("Download a consistent copy of the database", elem_id="admin-backup")
        backup_file = gr.File(label="Backup", interactive=False)

    refresh = gr.Button("Refresh", size="sm", elem_id="admin-refresh")
    refresh_outputs = [users, who, likert_min, likert_max, overlap, guidelines, ranking_guidelines, stats, agreement,
                       models_table, model_base, prompt_format, selection]

    def snapshot(db) -> tuple:
        from labeler.services.projects import get_project

        project = get_project(db, ctx.project)
        names = [row[0] for row in users_table(db)]
        return (
            users_table(db), gr.update(choices=names), project.likert_min, project.likert_max, project.overlap,
            project.guidelines_for("rating"), project.guidelines_for("ranking"),
            stats_table(db, ctx.project), agreement_markdown(db, ctx.project),
            *models_outputs(db), project.prompt_format, project.selection,
        )

    @keep_on_error(len(refresh_outputs))
    @requires(ctx, "admin")
    def admin_refresh(request: gr.Request):
        with ctx.connection() as db:
            return snapshot(db)

    # A successful add or password change also empties the form: a password left in a box is one a passer-by
    # can reveal, and a second click would try to add the same user again.
    @keep_on_error(len(refresh_outputs) + 2)
    @requires(ctx, "admin")
    def admin_add_user(username, password, role, request: gr.Request):
        from labeler.services import accounts

        with ctx.connection() as db:
            accounts.create_user(db, (username or "").strip(), password or "", role)
            gr.Info(f"Added {role} '{username}'.")
            return (*snapshot(db), "", "")

    @keep_on_error(len(refresh_outputs) + 1)
    @requires(ctx, "admin")
    def admin_set_password(username, password, request: gr.Request):
        from labeler.services import accounts

        with ctx.connection() as db:
            if not username:
                raise InputError("choose a user", field="username")
            accounts.set_password(db, username, password or "")
            gr.Info(f"Password of '{username}' changed.")
            return (*snapshot(db), "")

    @keep_on_error(len(refresh_outputs))
    @requires(ctx, "admin")
    def admin_toggle_active(username, request: gr.Request):
        from labeler.services import accounts

        with ctx.connection() as db:
            user = accounts.get_user(db, username or "")
            if user is None:
                raise InputError(f"no user {username!r}", field="username")
            accounts.set_active(db, user.username, not user.active)
            return snapshot(db)

    @keep_on_error(len(refresh_outputs))
    @requires(ctx, "admin")
    def admin_toggle_role(username, request: gr.Request):
        from labeler.services import accounts

        with ctx.connection() as db:
            user = accounts.get_user(db, username or "")
            if user is None:
                raise InputError(f"no user {username!r}", field="username")
            accounts.set_role(db, user.username, "annotator" if user.role == "admin" else "admin")
            return snapshot(db)

    @keep_on_error(len(refresh_outputs))
    @requires(ctx, "admin")
    def admin_save_project(low, high, k, text, ranking_text=None, prompt_format_name=None, selection_name=None,
                           request: gr.Request = None):
        """ranking_text, prompt_format_name or selection_name None (an API caller that sends the older fields):
        they stay."""
        from labeler.services import projects

        with ctx.connection() as db:
            numbers = {"likert_min": low, "likert_max": high, "overlap": k}
            for field, value in numbers.items():
                if value is None:  # an emptied number box arrives as None
                    raise InputError("enter a whole number", field=field)
            projects.update_project(db, ctx.project, **{f: int(v) for f, v in numbers.items()}, guidelines=text or "",
                                    ranking_guidelines=ranking_text, prompt_format=prompt_format_name,
                                    selection=selection_name)
            gr.Info("Project settings saved.")
            return snapshot(db)

    @keep_on_error(len(refresh_outputs) + 2)
    @requires(ctx, "admin")
    def admin_register_model(name, folder, base, request: gr.Request):
        from labeler.services import hub, models

        with ctx.connection() as db:
            row = models.register_policy_from_web(db, (name or "").strip(), folder, base or None)
            hub.write_registered_model_card(db, row["name"])  # README.md in the new folder
            gr.Info(f"Registered policy '{row['name']}': it is in Chat, Generate and the Arena now.")
            return (*snapshot(db), "", "")

    @keep_on_error(len(refresh_outputs) + 1)
    @requires(ctx, "admin")
    def admin_merge_adapter(name, request: gr.Request):
        from labeler.services import hub, models

        with ctx.connection() as db:
            row = models.merge_adapter_model(db, (name or "").strip())
            hub.write_registered_model_card(db, row["name"])  # README.md in the new folder
            gr.Info(f"Merged into policy '{row['name']}' ({row['path']}): plain transformers loads it.")
            return (*snapshot(db), "")

    @keep_on_error(1)
    @requires(ctx, "admin")
    def admin_show_item(item_id, request: gr.Request):
        with ctx.connection() as db:
            if item_id is None:
                raise InputError("enter an item id", field="item_id")
            return item_preview(db, int(item_id))

    @keep_on_error(1)
    @requires(ctx, "admin")
    def admin_mark_gold(item_id, value, request: gr.Request):
        from labeler.services import labeling

        with ctx.connection() as db:
            if item_id is None:
                raise InputError("enter an item id", field="item_id")
            labeling.set_gold(db, int(item_id), parse_gold(value))
            return item_preview(db, int(item_id))

    @keep_on_error(1)
    @requires(ctx, "admin")
    def admin_backup(request: gr.Request):
        from storage import backup

        with ctx.connection() as db:
            stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
            out = downloads.new_folder("backup-") / f"studio-{stamp}.db"
            return str(backup(db, out))

    refresh.click(admin_refresh, None, refresh_outputs, api_name="admin_refresh")
    add_user.click(admin_add_user, [new_name, new_password, new_role], [*refresh_outputs, new_name, new_password],
                   api_name="admin_add_user")
    set_password.click(admin_set_password, [who, reset_password], [*refresh_outputs, reset_password],
                       api_name="admin_set_password")
    toggle_active.click(admin_toggle_active, [who], refresh_outputs, api_name="admin_toggle_active")
    toggle_role.click(admin_toggle_role, [who], refresh_outputs, api_name="admin_toggle_role")
    save_project.click(
        admin_save_project, [likert_min, likert_max, overlap, guidelines, ranking_guidelines, prompt_format, selection],
        refresh_outputs,
        api_name="admin_save_project",
    )
    register_model.click(admin_register_model, [model_name, model_path, model_base],
                         [*refresh_outputs, model_name, model_path], api_name="admin_register_model")
    merge_adapter.click(admin_merge_adapter, [merge_name], [*refresh_outputs, merge_name], api_name="admin_merge_adapter")
    show_item.click(admin_show_item, [gold_item], [gold_preview], api_name="admin_show_item")
    mark_gold.click(admin_mark_gold, [gold_item, gold_value], [gold_preview], api_name="admin_mark_gold")
    backup_button.click(admin_backup, None, [backup_file], api_name="admin_backup")
    if ctx.app is not None:
        ctx.app.load(quiet_on_load(admin_refresh, len(refresh_outputs)), None, refresh_outputs, api_name="admin_load")
