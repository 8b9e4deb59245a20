"""The sealed-secret store: secret values the log refers to by marker, encrypted, forgettable.

A stored event or blob never holds a secret: it holds ``[REDACTED:<kind>:<name>:<id>]``
(``coder_es.redaction``) and the value is sealed here, so the agent's effects and its next request
can be rebuilt exactly (``unseal_text``) while a copied store leaks nothing.

Keys (envelope encryption, the usual crypto-shredding layout):
- the USER KEY (32 random bytes) lives outside every store: ``$CODER_ES_SEALING_KEY`` (base64, for
  fleets), else the file named by ``$CODER_ES_SEALING_KEY_FILE``, else
  ``user_data_dir()/sealing.key`` (created 0600 on the first secret sealed);
- each session has its own DATA KEY, stored in the store wrapped (AES-GCM) by the user key;
- every sealed value and sealed blob is AES-GCM encrypted by its session's data key, with the
  session and the value's id as associated data (a ciphertext moved to another slot fails).

A value's id is ``HMAC(session data key, kind:name:value)``, 12 hex digits: the same value gets the
same marker within a session (so it is stored once) and, with the data key gone, an id confirms
nothing about a guessed value. ``forget`` deletes the wrapped data key: every value of the session
becomes unreadable at once (crypto-shredding), while the events, their markers and the hash chain
stay exactly as recorded, so ``verify`` still passes.

Records live in the store's view table under ``sealed/`` (they are not rebuildable like the
projection checkpoints around them, and nothing clears that table wholesale). Blobs with no session
(the system prompt recorded before a session exists) are sealed under ``STORE_SCOPE``.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import os
import threading
import time
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

from coder_es.errors import CoderESError
from coder_es.redaction import MARKER, Redactor
from coder_es.store.views import ViewRecord, ViewStore
from coder_es.userdirs import user_data_dir

KEY_VAR = "CODER_ES_SEALING_KEY"
KEY_FILE_VAR = "CODER_ES_SEALING_KEY_FILE"
KEY_FILENAME = "sealing.key"
STORE_SCOPE = UUID(int=0)
"""The scope of sealed blobs stored outside any session (``forget --all`` shreds it)."""
_PREFIX = "sealed/"


class SealingKeyError(CoderESError):
    """The user key is missing, malformed, or does not open this store's sealed values."""


class SealedValueUnavailableError(CoderESError):
    """A sealed value is needed but was forgotten, or never reached this store."""


@dataclass(frozen=True)
class UserKey:
    material: bytes
    source: str
    """Where it came from, for messages (never the key itself)."""


def _setting_help() -> str:
    return f"set {KEY_VAR} (base64) or {KEY_FILE_VAR}, or restore the key file"


def load_user_key(environ: Mapping[str, str] = os.environ, *, create: bool) -> UserKey:
    """The user key from the environment or the user's data directory; ``create`` makes the
    default key file when there is none."""
    raw = environ.get(KEY_VAR, "").strip()
    if raw:
        try:
            material = base64.b64decode(raw, validate=True)
        except ValueError:
            material = b""
        if len(material) != 32:
            msg = f"{KEY_VAR} must be 32 bytes in base64 (e.g. `head -c32 /dev/urandom | base64`)"
            raise SealingKeyError(msg)
        return UserKey(material, f"${KEY_VAR}")
    named = environ.get(KEY_FILE_VAR, "").strip()
    path = Path(named) if named else user_data_dir(environ) / KEY_FILENAME
    try:
        material = path.read_bytes()
    except FileNotFoundError:
        if named or not create:
            msg = f"the sealing key file {path} is missing: {_setting_help()}"
            raise SealingKeyError(msg) from None
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        material = os.urandom(32)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(material)
    except OSError as e:
        msg = f"cannot read the sealing key file {path}: {e.strerror}"
        raise SealingKeyError(msg) from e
    if len(material) != 32:
        msg = f"the sealing key file {path} is not a 32-byte key: {_setting_help()}"
        raise SealingKeyError(msg)
    return UserKey(material, str(path))


class _NotOpened(Exception):
    """AES-GCM refused a record: the wrong key, or a damaged record (``InvalidTag``)."""


# cryptography is imported on first use: commands that never seal or open a value (`sessions`,
# `tree`, ...) do not load it (start-up time).


def _encrypt(key: bytes, data: bytes, aad: bytes) -> bytes:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    nonce = os.urandom(12)
    return nonce + AESGCM(key).encrypt(nonce, data, aad)


def _decrypt(key: bytes, record: bytes, aad: bytes) -> bytes:
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    try:
        return AESGCM(key).decrypt(record[:12], record[12:], aad)
    except InvalidTag:
        raise _NotOpened from None


class SecretVault:
    """Seals and opens a store's secret values, per session (see the module docstring)."""

    def __init__(
        self, views: ViewStore, environ: Mapping[str, str] | None = None, *, where: str = ""
    ) -> None:
        self.views = views
        self.environ = dict(os.environ if environ is None else environ)
        self.where = where
        self._user: UserKey | None = None
        self._keys: dict[UUID, bytes] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ keys

    def _user_key(self, *, create: bool) -> UserKey:
        if self._user is None:
            self._user = load_user_key(self.environ, create=create)
        return self._user

    def _data_key(self, session: UUID, *, create: bool) -> bytes | None:
        """The session's data key; None when this store never sealed anything for it (a
        replay store, a store built from an export: its markers stay markers)."""
        with self._lock:
            key = self._keys.get(session)
            if key is not None:
                return key
            aad = b"coder-es data key " + session.bytes
            record = self.views.get(f"{_PREFIX}{session}/key")
            if record is None:
                if self.forgotten(session):
                    raise SealedValueUnavailableError(self._forgotten_message(session))
                if not create:
                    return None
                key = os.urandom(32)
                wrapped = _encrypt(self._user_key(create=True).material, key, aad)
                self.views.put(f"{_PREFIX}{session}/key", ViewRecord(0, wrapped))
                # Two processes creating the scope's key at once: the record that stayed wins.
                record = self.views.get(f"{_PREFIX}{session}/key")
            if record is not None and (key is None or record.data != wrapped):
                user = self._user_key(create=False)
                try:
                    key = _decrypt(user.material, record.data, aad)
                except _NotOpened:
                    msg = (
                        f"the sealing key from {user.source} does not open the sealed values of "
                        f"session {session}{self.where}: it is not the key they were sealed "
                        f"with ({_setting_help()})"
                    )
                    raise SealingKeyError(msg) from None
            if key is not None:
                self._keys[session] = key
            return key

    def _sealing_key(self, session: UUID) -> bytes:
        key = self._data_key(session, create=True)
        assert key is not None
        return key

    def _forgotten_message(self, session: UUID) -> str:
        return (
            f"session {session}'s sealed secrets were forgotten (`coder-es forget`); what needs "
            "them cannot be rebuilt"
        )

    # ------------------------------------------------------------------ values

    def sealer(self, session: UUID) -> Callable[[str, str, str], str]:
        """The ``seal(kind, name, value) -> id`` callback redaction uses for ``session``."""

        def seal(kind: str, name: str, value: str) -> str:
            key = self._sealing_key(session)
            raw = value.encode("utf-8", "surrogateescape")
            ident = hmac.new(key, f"{kind}:{name}:".encode() + raw, hashlib.sha256)
            id = ident.hexdigest()[:12]
            slot = f"{_PREFIX}{session}/v/{id}"
            if self.views.get(slot) is None:
                aad = session.bytes + id.encode()
                self.views.put(slot, ViewRecord(0, _encrypt(key, raw, aad)))
            return id

        return seal

    def open_value(self, session: UUID, id: str) -> str | None:
        """The value sealed as ``id``; None when this store does not hold it (a replay of a
        cassette: the recording's redacted form is all there is)."""
        key = self._data_key(session, create=False)
        record = None if key is None else self.views.get(f"{_PREFIX}{session}/v/{id}")
        if key is None or record is None:
            return None
        try:
            raw = _decrypt(key, record.data, session.bytes + id.encode())
        except _NotOpened:
            msg = f"sealed value {id} of session {session} is damaged"
            raise SealedValueUnavailableError(msg) from None
        return raw.decode("utf-8", "surrogateescape")

    def unseal_text(self, session: UUID, text: str) -> str:
        """``text`` with every sealed marker replaced by the value it stands for."""
        if "[REDACTED:" not in text:
            return text

        def value(match: Any) -> str:
            id = match.group(3)
            found = None if id is None else self.open_value(session, id)
            return match.group(0) if found is None else found

        return MARKER.sub(value, text)

    def unseal_value(self, session: UUID, value: Any) -> Any:
        if isinstance(value, str):
            return self.unseal_text(session, value)
        if isinstance(value, dict):
            return {k: self.unseal_value(session, v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.unseal_value(session, v) for v in value]
        return value

    # ------------------------------------------------------------------ blobs

    def seal_blob(self, session: UUID, digest: str, data: bytes) -> None:
        slot = f"{_PREFIX}{session}/b/{digest}"
        if self.views.get(slot) is not None:
            return
        key = self._sealing_key(session)
        sealed = _encrypt(key, zlib.compress(data, 6), session.bytes + bytes.fromhex(digest))
        self.views.put(slot, ViewRecord(0, sealed))

    def open_blob(self, session: UUID, digest: str) -> bytes | None:
        """The sealed content of ``digest`` in ``session``, or None when it has none there."""
        record = self.views.get(f"{_PREFIX}{session}/b/{digest}")
        if record is None:
            if self.forgotten(session):
                raise SealedValueUnavailableError(self._forgotten_message(session))
            return None
        key = self._data_key(session, create=False)
        if key is None:
            return None
        try:
            return zlib.decompress(
                _decrypt(key, record.data, session.bytes + bytes.fromhex(digest))
            )
        except (_NotOpened, zlib.error):
            msg = f"the sealed copy of blob {digest} in session {session} is damaged"
            raise SealedValueUnavailableError(msg) from None

    # ------------------------------------------------------------------ forgetting

    def forget(self, session: UUID) -> bool:
        """Destroy ``session``'s data key (its sealed values become unreadable); whether it had
        one."""
        with self._lock:
            had = self.views.get(f"{_PREFIX}{session}/key") is not None
            self.views.put(
                f"{_PREFIX}{session}/forgotten", ViewRecord(int(time.time()), b"forgotten")
            )
            self.views.delete(f"{_PREFIX}{session}/key")
            self._keys.pop(session, None)
            return had

    def forgotten(self, session: UUID) -> bool:
        return self.views.get(f"{_PREFIX}{session}/forgotten") is not None


@dataclass(frozen=True)
class Sealing:
    """What redaction at record time needs: what to find, and where sealed values go."""

    redactor: Redactor
    vault: SecretVault

    def redact_kwargs(self, session: UUID, kwargs: dict[str, Any]) -> dict[str, Any]:
        return self.redactor.redact_kwargs(kwargs, self.vault.sealer(session))

    # -- the blob store's side (coder_es.store.blobs.BlobSealer)

    def has_secret(self, data: bytes) -> bool:
        return self.redactor.has_secret(data)

    def seal_blob(self, scope: UUID, digest: str, data: bytes) -> bytes:
        self.vault.seal_blob(scope, digest, data)
        return self.redactor.redact_blob(data, self.vault.sealer(scope))

    def open_blob(self, scopes: list[UUID], digest: str) -> bytes:
        for scope in scopes:
            with contextlib.suppress(SealedValueUnavailableError):
                data = self.vault.open_blob(scope, digest)
                if data is not None:
                    return data
        forgotten = [s for s in scopes if self.vault.forgotten(s)]
        if forgotten:
            msg = (
                f"blob {digest} holds a secret sealed in session {forgotten[0]}, whose sealed "
                "secrets were forgotten (`coder-es forget`): its exact content is gone"
            )
        else:
            msg = f"blob {digest} is sealed but no sealed copy of it is in this store"
        raise SealedValueUnavailableError(msg)

    def unseal_event(self, event: Any) -> Any:
        """``event`` as it was before redaction (a copy), or itself when it holds no marker."""
        fields = {
            k: v for k, v in vars(event).items() if k[0] != "_" and k not in _EVENT_BASE_FIELDS
        }
        if not any(_mentions_marker(v) for v in fields.values()):
            return event
        copy = object.__new__(type(event))
        copy.__dict__.update(event.__dict__)
        # The copy still links the chain by what was recorded, should anything ask.
        copy.__dict__["_recorded_hash"] = event.chain_hash()
        for k, v in fields.items():
            copy.__dict__[k] = self.vault.unseal_value(event.originator_id, v)
        return copy


_EVENT_BASE_FIELDS = frozenset({"originator_id", "originator_version", "timestamp"})


def _mentions_marker(value: Any) -> bool:
    if isinstance(value, str):
        return "[REDACTED:" in value
    if isinstance(value, dict):
        return any(_mentions_marker(v) for v in value.values())
    if isinstance(value, list):
        return any(_mentions_marker(v) for v in value)
    return False


def resolve_env_markers(value: Any, environ: Mapping[str, str]) -> tuple[Any, list[str]]:
    """``value`` with ``[REDACTED:env:NAME...]`` markers replaced by ``environ[NAME]`` (replay in
    live mode, from a cassette that carries no secret), and the markers left unresolved: other
    kinds, and variables not set here."""
    missing: list[str] = []

    def text(s: str) -> str:
        if "[REDACTED:" not in s:
            return s

        def one(match: Any) -> str:
            kind, name = match.group(1), match.group(2)
            if kind == "env" and name in environ:
                return environ[name]
            missing.append(f"[REDACTED:{kind}:{name}]")
            return str(match.group(0))

        return MARKER.sub(one, s)

    def walk(v: Any) -> Any:
        if isinstance(v, str):
            return text(v)
        if isinstance(v, dict):
            return {k: walk(x) for k, x in v.items()}
        if isinstance(v, list):
            return [walk(x) for x in v]
        return v

    return walk(value), list(dict.fromkeys(missing))
