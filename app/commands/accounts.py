"""`capscope users`: add, list, disable and enable the annotation store's users
(registered by annotation_store, between `export` and `agreement`)."""
from __future__ import annotations

import getpass
import os
import sys
from pathlib import Path

from capscope.commands.options import add_db_option, open_store
from capscope.common.errors import CapscopeError


def register_users(sub) -> None:
    users = sub.add_parser("users", help="manage users")
    users_sub = users.add_subparsers(dest="users_command", required=True, metavar="ACTION")
    add = users_sub.add_parser("add", help="add a user (or --replace an existing one's password and role)")
    add.add_argument("name")
    secret = add.add_mutually_exclusive_group()
    secret.add_argument("--password", default=None,
                        help="default: $CAPSCOPE_PASSWORD, else asked for twice (or one line read from standard "
                             "input when it is not a terminal); at least 12 characters")
    secret.add_argument("--password-file", type=Path, default=None, metavar="FILE",
                        help="read the password from the first line of FILE")
    add.add_argument("--role", default="annotator", choices=["admin", "annotator", "reviewer"])
    add.add_argument("--replace", action="store_true")
    add_db_option(add)
    add.set_defaults(func=run_users_add)
    listing = users_sub.add_parser("list", help="list users (disabled ones marked)")
    add_db_option(listing)
    listing.set_defaults(func=run_users_list)
    for action, active, text in (("disable", False, "disable a user: they can no longer sign in, and their "
                                  "sessions end (their labels stay)"), ("enable", True, "enable a disabled user")):
        toggle = users_sub.add_parser(action, help=text)
        toggle.add_argument("name")
        add_db_option(toggle)
        toggle.set_defaults(func=run_users_set_active, active=active)


def run_users_add(args) -> int:
    from capscope.annotation.users import add_user

    password = new_password(args)
    user = add_user(open_store(args), args.name, password, args.role, replace=args.replace)
    print(f"user {user.name} ({user.role}) saved")
    return 0


def new_password(args) -> str:
    """--password, --password-file's first line, $CAPSCOPE_PASSWORD, else asked for twice
    (a typo would lock the user out); without a terminal, one line of standard input."""
    if args.password_file is not None:
        try:
            lines = args.password_file.read_text(encoding="utf-8").splitlines()
        except OSError as err:
            raise CapscopeError(f"cannot read {args.password_file}: {err.strerror}") from None
        return lines[0] if lines else ""
    password = args.password or os.environ.get("CAPSCOPE_PASSWORD")
    if password:
        return password
    if not sys.stdin.isatty():
        return sys.stdin.readline().rstrip("\r\n")
    password = getpass.getpass(f"password for {args.name}: ")
    if getpass.getpass("again: ") != password:
        raise CapscopeError("the two passwords differ")
    return password


def run_users_list(args) -> int:
    from capscope.annotation.users import list_users

    for user in list_users(open_store(args), include_disabled=True):
        print(f"{user.name}\t{user.role}" + ("" if user.active else "\tdisabled"))
    return 0


def run_users_set_active(args) -> int:
    from capscope.annotation.users import set_active

    user = set_active(open_store(args), args.name, args.active)
    print(f"user {user.name} {'enabled' if user.active else 'disabled'}")
    return 0
