"""``coder-es forget``: destroy sessions' sealed secrets (crypto-shredding).

Forgetting deletes the sessions' wrapped data keys and sealed records, rotates the store's
wrapping key (``SecretVault.forget_sessions``), then scrubs the store's files so that no byte of a
deleted record remains (``coder_es.store.scrub``); exit 1 when another process has the store open
and the scrub must wait (the secrets are already unreadable: their keys are gone).

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
    targets = [*sessions, STORE_SCOPE] if args.all else sessions
    had = set(app.sealing.vault.forget_sessions(targets))
    shredded = [str(sid) for sid in sessions if sid in had]
    # The deleted records' bytes stay in the store's files until scrubbed; the scrub needs the
    # store closed in this process (the LMDB data file is replaced by a compacted copy).
    ctx.close()
    from coder_es.store.scrub import scrub_store
    from coder_es.store.views import StoreBusyError

    busy = None
    given_back = 0
    try:
        given_back = scrub_store(ctx.config).given_back
    except StoreBusyError as e:
        busy = str(e)
    if args.json:
        print_json(
            {
                "sessions": [str(s) for s in sessions],
                "shredded": shredded,
                "scrubbed": busy is None,
                "bytes_given_back": given_back,
            }
        )
    else:
        print(
            f"forgot the sealed secrets of {len(sessions)} session(s); "
            f"{len(shredded)} had sealed values, now unreadable"
            + (
                ""
                if busy
                else f"; the store's freed space was scrubbed ({given_back} bytes given back)"
            )
        )
    if busy:
        print(f"coder-es: {busy}", file=sys.stderr)
        return 1
    return 0
