import pytest

from labeler.services.data import accounts
from labeler.services.data.accounts import User
from labeler.errors import InputError, PermissionDenied


def test_create_and_authenticate(db):
    user = accounts.create_user(db, "alice", "correct horse", role="annotator")
    assert user == User(id=1, username="alice", role="annotator", active=True, must_change_password=False)
    assert accounts.authenticate(db, "alice", "correct horse") == user
    assert accounts.authenticate(db, "alice", "wrong password") is None
    assert accounts.authenticate(db, "nobody", "correct horse") is None
    assert accounts.get_user(db, "nobody") is None


def test_hash_is_salted_and_not_the_password(db):
    accounts.create_user(db, "a", "same password")
    accounts.create_user(db, "b", "same password")
    rows = list(db.execute("SELECT password_hash, salt FROM users ORDER BY id"))
    assert rows[0][0] != rows[1][0] and rows[0][1] != rows[1][1]
    assert all(row[0].startswith("scrypt$") and "same password" not in row[0] for row in rows)


def test_set_password(db):
    accounts.create_user(db, "alice", "old password")
    accounts.set_password(db, "alice", "new password")
    assert accounts.authenticate(db, "alice", "old password") is None
    assert accounts.authenticate(db, "alice", "new password").username == "alice"
    with pytest.raises(InputError, match="unknown user"):
        accounts.set_password(db, "bob", "whatever123")


@pytest.mark.parametrize(
    "username, password, role, field",
    [("", "long enough", "annotator", "username"), ("has space", "long enough", "annotator", "username"),
     ("carol", "short", "annotator", "password"), ("carol", "long enough", "root", "role")],
)
def test_invalid_accounts_are_refused(db, username, password, role, field):
    with pytest.raises(InputError) as error:
        accounts.create_user(db, username, password, role=role)
    assert error.value.field == field
    assert accounts.list_users(db) == []


def test_duplicate_username(db):
    accounts.create_user(db, "alice", "password1")
    with pytest.raises(InputError, match="already exists"):
        accounts.create_user(db, "alice", "password2")


def test_ensure_admin_only_on_empty_table(db):
    password = accounts.ensure_admin(db)
    assert isinstance(password, str) and len(password) >= 16
    assert accounts.authenticate(db, "admin", password).role == "admin"
    assert accounts.ensure_admin(db) is None  # second start: nothing created, nothing printed
    assert [u.username for u in accounts.list_users(db)] == ["admin"]


def test_ensure_admin_does_nothing_when_users_exist(db):
    accounts.create_user(db, "alice", "password1")
    assert accounts.ensure_admin(db) is None
    assert accounts.get_user(db, "admin") is None


def test_require_user_and_admin(db):
    accounts.create_user(db, "root", "password1", role="admin")
    accounts.create_user(db, "alice", "password1")
    assert accounts.require_admin(db, "root").username == "root"
    assert accounts.require_user(db, "alice").role == "annotator"
    with pytest.raises(PermissionDenied):
        accounts.require_admin(db, "alice")
    for name in (None, "", "ghost"):
        with pytest.raises(PermissionDenied):
            accounts.require_user(db, name)


def test_deactivated_user_cannot_log_in_and_last_admin_is_kept(db):
    accounts.create_user(db, "root", "password1", role="admin")
    accounts.create_user(db, "alice", "password1")
    assert accounts.set_active(db, "alice", False).active is False
    assert accounts.authenticate(db, "alice", "password1") is None
    with pytest.raises(PermissionDenied):
        accounts.require_user(db, "alice")
    with pytest.raises(InputError, match="no active admin"):
        accounts.set_active(db, "root", False)
    with pytest.raises(InputError, match="no active admin"):
        accounts.set_role(db, "root", "annotator")
    assert accounts.require_admin(db, "root").active  # both refusals rolled back


def test_ensure_admin_race_creates_one_admin(db_path):
    import threading

    from storage import open_db

    open_db(db_path).conn.close()  # migrate once up front
    barrier, results = threading.Barrier(4), []

    def start_server():
        connection = open_db(db_path)  # a connection per thread, as in the app
        barrier.wait()
        results.append(accounts.ensure_admin(connection))
        connection.conn.close()

    threads = [threading.Thread(target=start_server) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    passwords = [r for r in results if r is not None]
    assert len(results) == 4 and len(passwords) == 1
    assert [u.username for u in accounts.list_users(open_db(db_path))] == ["admin"]


def test_password_change_and_deactivation_move_the_session_epoch(db):
    from labeler.services.data import accounts

    accounts.create_user(db, "root", "root-password-1", role="admin")  # so zoe may be deactivated
    accounts.create_user(db, "zoe", "zoe-password-1")
    assert accounts.session_epoch(db, "zoe") == 0
    accounts.set_password(db, "zoe", "zoe-password-2")
    assert accounts.session_epoch(db, "zoe") == 1
    assert accounts.authenticate(db, "zoe", "zoe-password-2").session_epoch == 1
    accounts.set_active(db, "zoe", False)
    assert accounts.session_epoch(db, "zoe") is None  # no session of a deactivated user is valid
    accounts.set_active(db, "zoe", True)
    assert accounts.session_epoch(db, "zoe") == 2  # deactivating moved it; reactivating does not move it back
    accounts.set_role(db, "zoe", "admin")
    assert accounts.session_epoch(db, "zoe") == 2 and accounts.session_epoch(db, "nobody") is None


def test_the_one_time_admin_password_must_be_replaced_before_anything_else(db):
    """Issue 14 item 10: the password `serve` prints logs in once, and then only lets the admin replace it."""
    from labeler.services.data.accounts import PasswordChangeRequired

    password = accounts.ensure_admin(db)
    admin = accounts.authenticate(db, "admin", password)
    assert admin.must_change_password is True
    with pytest.raises(PasswordChangeRequired, match="one-time password"):
        accounts.require_user(db, "admin")
    with pytest.raises(PasswordChangeRequired):
        accounts.require_admin(db, "admin")
    # Each refusal names the field, and changes nothing.
    for current, new, repeat, field in [
        ("wrong-password", "new-password-1", "new-password-1", "current password"),
        (password, "short", "short", "password"),
        (password, "new-password-1", "new-password-2", "repeat new password"),
        (password, password, password, "new password"),
    ]:
        with pytest.raises(InputError) as error:
            accounts.change_own_password(db, "admin", current, new, repeat)
        assert error.value.field == field
    assert accounts.authenticate(db, "admin", password).must_change_password is True
    epoch = admin.session_epoch

    changed = accounts.change_own_password(db, "admin", password, "new-password-1", "new-password-1")
    assert changed.must_change_password is False and changed.session_epoch == epoch + 1
    assert accounts.authenticate(db, "admin", password) is None
    assert accounts.require_admin(db, "admin").username == "admin"


def test_users_created_by_an_admin_need_no_password_change(db):
    assert accounts.create_user(db, "alice", "password1").must_change_password is False
    assert accounts.require_user(db, "alice").username == "alice"
