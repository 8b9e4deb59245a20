"""``coder-es forget``: destroy sessions' sealed secrets (crypto-shredding).

The events keep their markers and the hash chain is untouched, so ``verify`` still passes; what
needed a forgotten value (resuming the session, restoring a file that held a secret) says so.
"""

from __future__ import annotations

import argparse
import sys

from coder_es.cli.context import Context


def cmd_forget(args: argparse.Namespace, ctx: Context) -> int:
    from datetime import UTC, datetime, timedelta

    from coder_es.cli.context import print_json
    from coder_es.errors import UsageError
    from coder_es.store.blobs import STORE_SCOPE

    days = args.older_than
    if args.expired:
        days = ctx.settings.redaction.forget_after_days
        if days is None:
            msg = "--expired needs redaction.forget_after_days in the configuration"
            raise UsageError(msg)
    chosen = [bool(args.session), args.all, days is not None]
    if sum(chosen) != 1:
        msg = "forget takes one of: SESSION, --all, --older-than DAYS, --expired"
        raise UsageError(msg)
    if days is not None and days < 0:
        msg = "--older-than takes a number of days >= 0"
        raise UsageError(msg)
    app = ctx.app
    if args.session:
        sessions = [app.resolve_session(args.session)]
    else:
        cutoff = datetime.now(UTC) - timedelta(days=days or 0)
        sessions = [s.id for s in app.iter_session_summaries() if args.all or s.started_at < cutoff]
    if not args.yes and sys.stdin.isatty() and sys.stdout.isatty() and sessions:
        # Shredding cannot be undone: a person at a terminal confirms (scripts pass --yes).
        answer = input(
            f"forget the sealed secrets of {len(sessions)} session(s)? "
            "This cannot be undone. [y/N] "
        )
        if answer.strip().lower() not in ("y", "yes"):
            print("nothing forgotten")
            return 1
    vault = app.sealing.vault
    shredded = [str(sid) for sid in sessions if vault.forget(sid)]
    if args.all:
        # Blobs stored outside any session (a system prompt quoting a secret).
        vault.forget(STORE_SCOPE)
    if args.json:
        print_json({"sessions": [str(s) for s in sessions], "shredded": shredded})
    else:
        print(
            f"forgot the sealed secrets of {len(sessions)} session(s); "
            f"{len(shredded)} had sealed values, now unreadable"
        )
    return 0
