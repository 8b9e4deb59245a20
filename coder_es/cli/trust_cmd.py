"""``coder-es trust [--show | --revoke]``: let the workspace's project config loosen settings.

A project's ``.coder-es/config.toml`` comes with the repository; until the user trusts it, it
may only tighten (``coder_es.config.untrusted``: an allow-list of keys that tighten; every other
setting is held back). ``trust`` records the file's sha256 in the
user config directory (like ``direnv allow``): editing the file needs trusting again, and so does
editing a workspace script its hooks run (``config.hook_scripts``).
"""

from __future__ import annotations

import argparse

from coder_es.cli.context import Context


def cmd_trust(args: argparse.Namespace, ctx: Context) -> int:
    from coder_es.config.hook_scripts import project_trust
    from coder_es.config.load import project_config_path, settings_needing_trust
    from coder_es.config.trust import TrustStore
    from coder_es.errors import UsageError

    path = project_config_path(ctx.workspace)
    store = TrustStore()
    if args.revoke:
        if store.revoke(path):
            print(f"{path}: no longer trusted")
        else:
            print(f"{path}: was not trusted")
        return 0
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise UsageError(f"{path} does not exist: this workspace has no project config") from None
    except OSError as e:
        raise UsageError(f"{path}: cannot read: {e.strerror}") from None
    state = store.state(path, *project_trust(path, data))
    granted = settings_needing_trust(ctx.workspace)
    if args.show:
        status = {
            "trusted": "trusted",
            "untrusted": "not trusted",
            "changed": "changed since you trusted it: not trusted",
        }[state.status]
        print(f"{path}: {status} (sha256 {state.sha256[:16]}…)")
        if state.problem:
            print(f"  {state.problem}")
        for name in state.changed_scripts:
            print(f"  the hook script {name} changed since you trusted it")
        verb = "applies because it is trusted" if state.trusted else "ignored until trusted"
        for setting in granted:
            shown = f"{setting.origin}: {setting.path} = {setting.value!r}"
            print(f"  {shown} {verb}: {setting.reason}")
        if not granted:
            print("  nothing in it needs trust: every setting applies either way")
        return 0
    store.trust(path, state.sha256, state.scripts)
    print(f"{path}: trusted (sha256 {state.sha256[:16]}…); editing it needs trusting again")
    for name in state.scripts:
        print(f"  and so does editing {name}, a script its hooks run")
    for setting in granted:
        print(f"  now applies: {setting.origin}: {setting.path} = {setting.value!r}")
    return 0
