"""`nanobot-summary acl`.

The Redis ACL user that confines this instance to its own names, printed for the operator (the rules are
`Keys.acl_rules()`; docs/operations.md, "Instances that must not read each other")."""

from __future__ import annotations

import argparse

from worker.commands.startup import STARTUP_ERRORS, instance, refuse


def acl_line(user: str, rules: list[str]) -> str:
    """A `user` line of redis.conf or an ACL file; the password is a placeholder, never one we know."""
    return " ".join(["user", user, "on", ">PASSWORD", *rules])


def main(args: argparse.Namespace) -> int:
    try:
        settings, _ = instance()
    except STARTUP_ERRORS as exc:
        return refuse(exc)
    keys = settings.keys
    user = args.user or f"nanobot-{keys.namespace}"
    print(
        f"# The Redis user of the nanobot instance of namespace {keys.namespace}: put it in redis.conf or the ACL "
        "file (or the same words after ACL SETUSER), PASSWORD replaced, and the user and password in this "
        "instance's REDIS_URL, for nanobot and its worker."
    )
    print(acl_line(user, keys.acl_rules()))
    return 0
