"""check_role(ctx, request, role): the check every handler makes first refuses with PermissionDenied before the
handler does anything (the tabs' own tests check that each handler calls it)."""
from __future__ import annotations

import gradio as gr
import pytest

from labeler.services import accounts
from labeler.services.errors import PermissionDenied
from labeler.ui.context import ServeSettings, UIContext
from labeler.ui.roles import check_role


@pytest.fixture
def ctx(db, db_path):
    accounts.create_user(db, "boss", "boss-password-1", role="admin")
    accounts.create_user(db, "ann", "ann-password-1")
    return UIContext(ServeSettings(db_path=db_path))


def test_admin_is_for_admins_only(ctx):
    assert check_role(ctx, gr.Request(username="boss"), "admin").username == "boss"
    with pytest.raises(PermissionDenied, match="'ann' is not an admin"):
        check_role(ctx, gr.Request(username="ann"), "admin")
    with pytest.raises(PermissionDenied, match="not logged in"):
        check_role(ctx, gr.Request(), "admin")
    with pytest.raises(PermissionDenied, match="not logged in"):
        check_role(ctx, None, "admin")


def test_user_takes_any_active_account_and_refuses_a_deactivated_one(db, ctx):
    assert check_role(ctx, gr.Request(username="ann"), "user").username == "ann"
    assert check_role(ctx, gr.Request(username="boss"), "user").username == "boss"
    accounts.set_active(db, "ann", False)
    with pytest.raises(PermissionDenied, match="unknown or deactivated"):
        check_role(ctx, gr.Request(username="ann"), "user")


def test_an_unknown_role_is_a_value_error(ctx):
    with pytest.raises(ValueError, match="role must be one of \\['admin', 'user'\\], got 'owner'"):
        check_role(ctx, gr.Request(username="boss"), "owner")
