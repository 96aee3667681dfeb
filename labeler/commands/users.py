"""`rlhf-studio users`: add, list, change passwords, deactivate. Needs no login: whoever can read the
database file already controls it, exactly like Jupyter's or Datasette's command-line tools."""
from __future__ import annotations

import argparse
import getpass
import secrets
import sys

from labeler.services.data.accounts import create_user, list_users, set_active, set_password
from labeler.errors import InputError
from storage import open_db


def register(subparsers, common: argparse.ArgumentParser) -> None:
    group = subparsers.add_parser("users", help="manage annotator and admin accounts",
                                  description="Add, list and manage the accounts that log into the web app.")
    actions = group.add_subparsers(dest="action", required=True, metavar="ACTION")
    add = actions.add_parser(
        "add", parents=[common], help="add an account",
        description=(
            "Add an account. Without --password you are asked for one (twice) when typing at a terminal; "
            "otherwise a random one is generated and printed once."
        ),
    )
    add.add_argument("name", help="username (letters, digits, _ . @ -)")
    add.add_argument("--role", choices=("annotator", "admin"), default="annotator", help="annotator (default) or admin")
    add.add_argument("--password", default=None, help="the password (visible in shell history; prefer the prompt)")
    add.add_argument("--generate", action="store_true", help="generate a random password and print it")
    add.set_defaults(func=run_add)
    listing = actions.add_parser("list", parents=[common], help="list accounts", description="List every account.")
    listing.set_defaults(func=run_list)
    passwd = actions.add_parser("passwd", parents=[common], help="set an account's password",
                                description="Set a new password (asked for, given with --password, or generated).")
    passwd.add_argument("name", help="username")
    passwd.add_argument("--password", default=None, help="the new password")
    passwd.add_argument("--generate", action="store_true", help="generate a random password and print it")
    passwd.set_defaults(func=run_passwd)
    for action, active in (("deactivate", False), ("activate", True)):
        parser = actions.add_parser(action, parents=[common], help=f"{action} an account (labels are kept)",
                                    description=f"{action.capitalize()} an account; its labels stay in the database.")
        parser.add_argument("name", help="username")
        parser.set_defaults(func=run_set_active, active=active)


def _open(args):
    return open_db(args.db)


def _password(args) -> tuple[str, bool]:
    """(password, generated?)"""
    if args.password is not None:
        return args.password, False
    if args.generate or not sys.stdin.isatty():
        return secrets.token_urlsafe(12), True
    first = getpass.getpass("Password: ")
    if getpass.getpass("Repeat password: ") != first:
        raise InputError("the passwords do not match", field="password")
    return first, False


def run_add(args) -> int:
    password, generated = _password(args)
    user = create_user(_open(args), args.name, password, role=args.role)
    print(f"added {user.role} '{user.username}'" + (f" with password: {password}" if generated else ""))
    return 0


def run_list(args) -> int:
    for user in list_users(_open(args)):
        print(f"{user.username:<24} {user.role:<10} {'active' if user.active else 'deactivated'}")
    return 0


def run_passwd(args) -> int:
    password, generated = _password(args)
    set_password(_open(args), args.name, password)
    print(f"password of '{args.name}' changed" + (f" to: {password}" if generated else ""))
    return 0


def run_set_active(args) -> int:
    user = set_active(_open(args), args.name, args.active)
    print(f"'{user.username}' is now {'active' if user.active else 'deactivated'}")
    return 0
