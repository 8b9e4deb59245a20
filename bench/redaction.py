"""Redaction benchmark: false positives, recall, and cost per megabyte.

1. False positives on real source trees without secrets: this repository (every tracked file) and
   the installed files of its dependencies (site-packages). Every hit is printed with its file,
   line and rule. Files of this repository that plant fake credentials on purpose (the redaction
   tests, this benchmark) are counted apart as "planted", not as false positives.
2. Recall on a labelled set of realistic fake credentials generated here (seeded), each kind in
   several contexts (.env line, JSON, YAML, shell export, Python literal, HTTP header, a JSON string
   after an escaped newline, Markdown): a credential counts as found when its value is gone and the
   marker names the expected rule. The target is >= 99%.
3. Cost per MB, medians, against baselines measured in the same run on the same bytes: reading the
   files, sha256 and zlib (what storing a blob costs anyway), and a single plain regular expression;
   plus storing every file as a blob with sealing on and off (the step's real cost).

Run:  python3 bench/redaction.py [--runs 3] [--per-kind 200] [--show 20]
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import importlib.metadata as md
import json
import os
import random
import re
import statistics
import string
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from coder_es.redaction import Redactor  # noqa: E402
from coder_es.sealing import Sealing, SecretVault  # noqa: E402
from coder_es.store.blobs import MemoryBlobStore  # noqa: E402
from coder_es.store.views import MemoryViewStore  # noqa: E402

DEPENDENCIES = (
    "eventsourcing", "lmdb", "httpx", "httpcore", "h11", "anyio", "idna", "certifi", "sniffio",
    "tree-sitter", "tree-sitter-python", "tree-sitter-javascript", "tree-sitter-typescript",
    "tree-sitter-go", "tree-sitter-rust", "merge3", "patiencediff", "rich", "pygments",
    "markdown-it-py", "mdurl", "msgspec", "cryptography", "cffi", "pycparser", "typing-extensions",
)  # fmt: skip
# This repository's files that hold fake credentials on purpose.
PLANTED = re.compile(
    r"^(fixtures/sessions/projects/ops/\.env|bench/redaction\.py|tests/.*(redaction|secret|"
    r"sealed|forget|cassette_format|fork_ancestors|cli_config|audit/conftest).*)$"
)
# A developer's environment without secrets in it: none of these may redact anything.
ENVIRONMENT = {
    "POSTGRES_PASSWORD": "postgres",
    "MYSQL_ROOT_PASSWORD": "root",
    "API_TOKEN": "changeme",
    "GITHUB_TOKEN": "",
    "HOME": "/home/dev",
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "DEPLOY_TOKEN": "q8Zr2LmX0vT4kP9sW3nB",  # a real-looking one: its rule runs on every byte
}


def median_time(fn: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


# ---------------------------------------------------------------------- corpora


def _text_file(path: Path) -> bytes | None:
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if b"\0" in data[:8192] or len(data) > 4_000_000:
        return None
    return data


def repository_files() -> dict[str, bytes]:
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.split(b"\0")
    out = {}
    for raw in listed:
        if raw:
            rel = os.fsdecode(raw)
            data = _text_file(ROOT / rel)
            if data is not None:
                out[rel] = data
    return out


def dependency_files() -> dict[str, bytes]:
    out = {}
    for name in DEPENDENCIES:
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            continue
        for f in dist.files or ():
            path = Path(str(dist.locate_file(f)))
            data = _text_file(path) if path.is_file() else None
            if data is not None:
                out[f"{name}:{f}"] = data
    return out


def hits(redactor: Redactor, files: dict[str, bytes]) -> list[tuple[str, int, str, str]]:
    """(file, line, rule, excerpt) for every redaction."""
    found = []
    marker = re.compile(rb"\[REDACTED:(\w+):([\w.*?\-]+)\]")
    for name, data in files.items():
        out = redactor.redact_bytes(data)
        if out == data:
            continue
        for m in marker.finditer(out):
            if m.group(0) in data:
                continue  # a marker already in the file (documentation of markers)
            line = out.count(b"\n", 0, m.start()) + 1
            text = out.splitlines()[line - 1].decode("utf-8", "replace").strip()[:100]
            found.append((name, line, f"{m.group(1).decode()}:{m.group(2).decode()}", text))
    return found


# ---------------------------------------------------------------------- labelled credentials

ALNUM = string.ascii_letters + string.digits
URLSAFE = ALNUM + "-_"


def _r(rng: random.Random, alphabet: str, n: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _jwt(rng: random.Random) -> str:
    header = _b64url(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    claims = {"sub": _r(rng, string.digits, 10), "name": "Ada", "iat": rng.randrange(10**9)}
    payload = _b64url(json.dumps(claims).encode())
    return f"{header}.{payload}.{_b64url(rng.randbytes(32))}"


def _pem(rng: random.Random) -> str:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519

    if rng.random() < 0.5:
        key = ec.derive_private_key(rng.randrange(1, 2**200), ec.SECP256R1())
        return key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ).decode()
    ed = ed25519.Ed25519PrivateKey.from_private_bytes(rng.randbytes(32))
    return ed.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    ).decode()


PASSWORD = ALNUM + "!#%&*()-_=+.,;~"
KINDS: dict[str, tuple[str, Callable[[random.Random], str]]] = {
    # kind: (expected rule, generator)
    "anthropic": ("anthropic_key", lambda r: "sk-ant-api03-" + _r(r, URLSAFE, 93) + "AA"),
    "openai_project": ("openai_key", lambda r: "sk-proj-" + _r(r, URLSAFE, 156)),
    "openai_legacy": (
        "openai_key",
        lambda r: "sk-" + _r(r, ALNUM, 20) + "T3BlbkFJ" + _r(r, ALNUM, 20),
    ),
    "github_classic": (
        "github_token",
        lambda r: r.choice(["ghp_", "gho_", "ghs_"]) + _r(r, ALNUM, 36),
    ),
    "github_fine_grained": (
        "github_pat",
        lambda r: "github_pat_11" + _r(r, ALNUM, 20) + "_" + _r(r, ALNUM, 59),
    ),
    "gitlab": ("gitlab_token", lambda r: "glpat-" + _r(r, URLSAFE, 20)),
    "slack": (
        "slack_token",
        lambda r: (
            r.choice(["xoxb-", "xoxp-"])
            + _r(r, string.digits, 12)
            + "-"
            + _r(r, string.digits, 13)
            + "-"
            + _r(r, ALNUM, 24)
        ),
    ),
    "stripe": ("stripe_key", lambda r: r.choice(["sk_live_", "rk_live_"]) + _r(r, ALNUM, 24)),
    "google": ("google_api_key", lambda r: "AIza" + _r(r, URLSAFE, 35)),
    "aws_access_key": (
        "aws_access_key",
        lambda r: r.choice(["AKIA", "ASIA"]) + _r(r, string.ascii_uppercase + "234567", 16),
    ),
    "jwt": ("jwt", _jwt),
    "private_key": ("private_key", _pem),
}
CONTEXTS = (
    "SECRET={v}\n",
    '{{"credential": "{v}"}}\n',
    "credential: {v}\n",
    "export CREDENTIAL={v}\n",
    "CREDENTIAL = '{v}'\n",
    "curl -H 'X-Key: {v}' https://api.example.com\n",
    '{{"out": "ok\\n{v}\\n"}}\n',
    "Use `{v}` here.\n",
)
# Credentials that are recognised by their context, not their shape.
CONTEXTUAL: dict[str, tuple[str, Callable[[random.Random], tuple[str, str]]]] = {
    "aws_secret_key": (
        "aws_secret_key",
        lambda r: (v := _r(r, ALNUM + "/+", 40), f"aws_secret_access_key = {v}\n"),
    ),
    "connection_password": (
        "connection_password",
        lambda r: (
            v := _r(r, PASSWORD, r.randrange(10, 25)),
            f"DATABASE_URL=postgresql://app_user:{v}@db.internal:5432/app\n",
        ),
    ),
    "bearer": (
        "bearer_token",
        lambda r: (v := _r(r, URLSAFE + ".", 40), f"Authorization: Bearer {v}\n"),
    ),
    "slack_webhook": (
        "slack_webhook",
        lambda r: (
            v := "T" + _r(r, ALNUM, 8) + "/B" + _r(r, ALNUM, 8) + "/" + _r(r, ALNUM, 24),
            f"url = https://hooks.slack.com/services/{v}\n",
        ),
    ),
}


def labelled(per_kind: int, seed: int = 16) -> list[tuple[str, str, str, str]]:
    """(kind, expected rule, value, text holding it)."""
    rng = random.Random(seed)
    out = []
    for kind, (rule, make) in KINDS.items():
        for i in range(per_kind):
            value = make(rng)
            out.append((kind, rule, value, CONTEXTS[i % len(CONTEXTS)].format(v=value)))
    for kind, (rule, make_ctx) in CONTEXTUAL.items():
        for _ in range(per_kind):
            value, text = make_ctx(rng)
            out.append((kind, rule, value, text))
    return out


def recall(redactor: Redactor, cases: list[tuple[str, str, str, str]]) -> dict[str, list[int]]:
    per_kind: dict[str, list[int]] = {}
    for kind, rule, value, text in cases:
        out = redactor.redact_text(text)
        ok = value not in out and f":{rule}]" in out
        counts = per_kind.setdefault(kind, [0, 0])
        counts[0] += ok
        counts[1] += 1
    return per_kind


# ---------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--per-kind", type=int, default=200)
    parser.add_argument("--show", type=int, default=20, help="hits to print per corpus")
    args = parser.parse_args()
    redactor = Redactor.from_environ(ENVIRONMENT)

    repo, deps = repository_files(), dependency_files()
    print("== false positives")
    for label, files in (("this repository", repo), ("dependencies' site-packages", deps)):
        size = sum(map(len, files.values())) / 1e6
        found = hits(redactor, files)
        planted = [h for h in found if label == "this repository" and PLANTED.match(h[0])]
        false = [h for h in found if h not in planted]
        print(
            f"{label}: {len(files)} files, {size:.1f} MB: {len(false)} false positive(s)"
            + (f", {len(planted)} planted fake credential(s) in test files" if planted else "")
        )
        for name, line, rule, text in false[: args.show]:
            print(f"  FP {name}:{line} {rule}: {text}")

    print("\n== recall on labelled fake credentials")
    cases = labelled(args.per_kind)
    per_kind = recall(redactor, cases)
    found_all = sum(c[0] for c in per_kind.values())
    for kind, (ok, n) in sorted(per_kind.items()):
        print(f"  {kind:22} {ok:5}/{n:<5} {100 * ok / n:6.2f}%")
    print(f"recall: {found_all}/{len(cases)} = {100 * found_all / len(cases):.2f}% (target >= 99%)")

    print("\n== cost per MB (medians of", args.runs, "runs)")
    corpus = b"".join([*repo.values(), *deps.values()])
    mb = len(corpus) / 1e6
    paths = [ROOT / p for p in repo]
    plain_rx = re.compile(rb"AKIA[0-9A-Z]{16}")
    timings = {
        "read the repository's files": (
            median_time(lambda: [p.read_bytes() for p in paths], args.runs),
            sum(map(len, repo.values())) / 1e6,
        ),
        "sha256": (median_time(lambda: hashlib.sha256(corpus).digest(), args.runs), mb),
        "zlib level 6": (median_time(lambda: zlib.compress(corpus, 6), args.runs), mb),
        "one plain regex (AKIA...)": (median_time(lambda: plain_rx.findall(corpus), args.runs), mb),
        "detect (has_secret)": (median_time(lambda: redactor.has_secret(corpus), args.runs), mb),
        "redact_bytes": (median_time(lambda: redactor.redact_bytes(corpus), args.runs), mb),
    }
    base = timings["zlib level 6"][0] / timings["zlib level 6"][1]
    for name, (seconds, size) in timings.items():
        per_mb = seconds / size
        print(f"  {name:30} {1000 * per_mb:8.2f} ms/MB  {size / seconds:8.1f} MB/s  "
              f"x{per_mb / base:5.2f} of zlib")  # fmt: skip

    # The step's real cost: storing every file of this repository and the dependencies as a blob.
    blobs_in = list(repo.values()) + list(deps.values())
    with tempfile.TemporaryDirectory() as home:
        environ = {"XDG_DATA_HOME": home, "HOME": home}

        def store(sealed: bool) -> None:
            blobs = MemoryBlobStore()
            if sealed:
                blobs.sealing = Sealing(redactor, SecretVault(MemoryViewStore(), environ))
            for data in blobs_in:
                blobs.put(data)

        plain = median_time(lambda: store(False), args.runs)
        sealed = median_time(lambda: store(True), args.runs)
    print(f"  {'put every file, no sealing':30} {1000 * plain / mb:8.2f} ms/MB")
    print(f"  {'put every file, sealing on':30} {1000 * sealed / mb:8.2f} ms/MB  "
          f"x{sealed / plain:5.2f} of storing without it")  # fmt: skip


if __name__ == "__main__":
    main()
