"""The Admin tab's "Users": accounts added, their passwords set, activated or deactivated, made admin or
annotator."""
from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from labeler.services.data import accounts
from labeler.errors import InputError
from labeler.ui.binding import bind
from labeler.ui.context import UIContext
from labeler.ui.roles import requires
from labeler.ui.soft_errors import keep_on_error
from labeler.ui.tabs.admin.snapshot import SHOWN, USER_HEADERS, snapshot


@dataclass(frozen=True)
class UsersPart:
    users: gr.Dataframe
    new_name: gr.Textbox
    new_password: gr.Textbox
    new_role: gr.Radio
    add_user: gr.Button
    who: gr.Dropdown  # the user the buttons below act on
    reset_password: gr.Textbox
    set_password: gr.Button
    toggle_active: gr.Button
    toggle_role: gr.Button


def build_users() -> UsersPart:
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
    return UsersPart(users, new_name, new_password, new_role, add_user, who, reset_password, set_password,
                     toggle_active, toggle_role)


# A successful add or password change also empties the form: a password left in a box is one a passer-by
# can reveal, and a second click would try to add the same user again.
@keep_on_error(len(SHOWN) + 2)
@requires("admin")
def add_user(ctx: UIContext, username, password, role, request: gr.Request) -> tuple:
    with ctx.connection() as db:
        accounts.create_user(db, (username or "").strip(), password or "", role)
        gr.Info(f"Added {role} '{username}'.")
        return (*snapshot(db, ctx.project), "", "")


@keep_on_error(len(SHOWN) + 1)
@requires("admin")
def set_password(ctx: UIContext, username, password, request: gr.Request) -> tuple:
    with ctx.connection() as db:
        if not username:
            raise InputError("choose a user", field="username")
        accounts.set_password(db, username, password or "")
        gr.Info(f"Password of '{username}' changed.")
        return (*snapshot(db, ctx.project), "")


def _user(db, username) -> accounts.User:
    user = accounts.get_user(db, username or "")
    if user is None:
        raise InputError(f"no user {username!r}", field="username")
    return user


@keep_on_error(len(SHOWN))
@requires("admin")
def toggle_active(ctx: UIContext, username, request: gr.Request) -> tuple:
    with ctx.connection() as db:
        user = _user(db, username)
        accounts.set_active(db, user.username, not user.active)
        return snapshot(db, ctx.project)


@keep_on_error(len(SHOWN))
@requires("admin")
def toggle_role(ctx: UIContext, username, request: gr.Request) -> tuple:
    with ctx.connection() as db:
        user = _user(db, username)
        accounts.set_role(db, user.username, "annotator" if user.role == "admin" else "admin")
        return snapshot(db, ctx.project)


def wire(ctx: UIContext, part: UsersPart, shown: list) -> None:
    """`shown`: the tab's SHOWN widgets, which every change here sets again."""
    part.add_user.click(bind(add_user, ctx), [part.new_name, part.new_password, part.new_role],
                        [*shown, part.new_name, part.new_password], api_name="admin_add_user")
    part.set_password.click(bind(set_password, ctx), [part.who, part.reset_password], [*shown, part.reset_password],
                            api_name="admin_set_password")
    part.toggle_active.click(bind(toggle_active, ctx), [part.who], shown, api_name="admin_toggle_active")
    part.toggle_role.click(bind(toggle_role, ctx), [part.who], shown, api_name="admin_toggle_role")
