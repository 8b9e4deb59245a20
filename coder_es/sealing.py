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
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from uuid import UUID

from coder_es.errors import CoderESError
from coder_es.redaction import MARKER, Redactor
from coder_es.store.views import Guard, ViewRecord, ViewStore
from coder_es.userdirs import user_data_dir

KEY_VAR = "CODER_ES_SEALING_KEY"
KEY_FILE_VAR = "CODER_ES_SEALING_KEY_FILE"
KEY_FILENAME = "sealing.key"
STORE_SCOPE = UUID(int=0)
"""The scope of sealed blobs stored outside any session (``forget --all`` shreds it)."""
_PREFIX = "sealed/"
_WRAP_KEY = "sealed/wrap/key"
"""The store's wrapping key (position: its generation), wrapped by the user key."""


def _wrap_aad(generation: int) -> bytes:
    return b"coder-es wrapping key " + generation.to_bytes(8, "big")


def _data_key_aad(session: UUID) -> bytes:
    return b"coder-es data key " + session.bytes


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
        self._kek: tuple[int, bytes] | None = None
        """The store's wrapping key (generation, key), once read."""
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ keys

    def _user_key(self, *, create: bool) -> UserKey:
        if self._user is None:
            self._user = load_user_key(self.environ, create=create)
        return self._user

    def _wrapping_key(self, generation: int, *, create: bool) -> bytes | None:
        """The store's wrapping key of ``generation`` (0: the user key itself, how stores
        before wrapping keys wrapped data keys); None when the store's current one is another
        generation (it was rotated meanwhile: read again), or there is none and not ``create``."""
        if generation == 0 and not create:
            return self._user_key(create=False).material
        cached = self._kek
        if cached is not None and cached[0] == generation:
            return cached[1]
        record = self.views.get(_WRAP_KEY)
        if record is None:
            if not create:
                return None
            kek = os.urandom(32)
            wrapped = _encrypt(self._user_key(create=True).material, kek, _wrap_aad(1))
            self.views.batch({_WRAP_KEY: ViewRecord(1, wrapped)}, guards=[Guard(_WRAP_KEY, None)])
            record = self.views.get(_WRAP_KEY)
            assert record is not None
        if create:
            generation = record.position
        elif record.position != generation:
            return None
        user = self._user_key(create=False)
        try:
            kek = _decrypt(user.material, record.data, _wrap_aad(record.position))
        except _NotOpened:
            raise SealingKeyError(self._wrong_key_message(user, "this store")) from None
        self._kek = (record.position, kek)
        return kek

    def _wrong_key_message(self, user: UserKey, what: str) -> str:
        return (
            f"the sealing key from {user.source} does not open the sealed values of {what}"
            f"{self.where}: it is not the key they were sealed with ({_setting_help()})"
        )

    def _data_key(self, session: UUID, *, create: bool) -> bytes | None:
        """The session's data key; None when this store never sealed anything for it (a
        replay store, a store built from an export: its markers stay markers)."""
        with self._lock:
            key = self._keys.get(session)
            if key is not None:
                return key
            slot = f"{_PREFIX}{session}/key"
            aad = _data_key_aad(session)
            for _attempt in range(8):  # each retry follows a rotation by another process
                record = self.views.get(slot)
                if record is None:
                    if self.forgotten(session):
                        raise SealedValueUnavailableError(self._forgotten_message(session))
                    if not create:
                        return None
                    kek = self._wrapping_key(0, create=True)
                    assert kek is not None and self._kek is not None
                    generation = self._kek[0]
                    key = os.urandom(32)
                    wrapped = ViewRecord(generation, _encrypt(kek, key, aad))
                    # Written only under the wrapping key still current (a rotation by another
                    # process would otherwise leave it wrapped by a destroyed key), and only if
                    # no other process created the session's key meanwhile (then theirs wins).
                    guards = [Guard(_WRAP_KEY, generation), Guard(slot, None)]
                    if self.views.batch({slot: wrapped}, guards=guards):
                        break
                    self._kek = None
                    continue
                kek = self._wrapping_key(record.position, create=False)
                if kek is None:
                    self._kek = None
                    continue
                try:
                    key = _decrypt(kek, record.data, aad)
                except _NotOpened:
                    user = self._user_key(create=False)
                    message = self._wrong_key_message(user, f"session {session}")
                    raise SealingKeyError(message) from None
                break
            else:
                msg = f"session {session}'s data key kept changing while read{self.where}"
                raise SealedValueUnavailableError(msg)
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
        one. See ``forget_sessions``."""
        return bool(self.forget_sessions([session]))

    def forget_sessions(self, sessions: list[UUID]) -> list[UUID]:
        """Crypto-shred ``sessions``: delete their wrapped data keys and sealed records, and
        rotate the store's wrapping key (every other session's data key is re-wrapped under a
        new one, the old one destroyed), all in one transaction; the sessions that had a key.

        The rotation is what makes a copy of an old wrapped data key worthless on its own: it
        was wrapped by a key that no longer exists. The bytes the deleted records leave in the
        store's files are removed by ``coder_es.store.scrub`` (the command does both).
        Without the user key (lost or wrong) nothing can be re-wrapped: the sessions are still
        forgotten, and the rotation waits for a forget run with the key."""
        gone = set(sessions)
        with self._lock:
            for _attempt in range(8):
                current = self.views.get(_WRAP_KEY)
                deletes: list[str] = []
                had: list[UUID] = []
                for session in sessions:
                    prefix = f"{_PREFIX}{session}/"
                    found = [k for k in self.views.keys(prefix) if k != prefix + "forgotten"]
                    if prefix + "key" in found:
                        had.append(session)
                    deletes += found
                puts = {
                    f"{_PREFIX}{s}/forgotten": ViewRecord(int(time.time()), b"forgotten")
                    for s in sessions
                }
                with contextlib.suppress(SealingKeyError):
                    puts.update(self._rotated(current, gone))
                guard = Guard(_WRAP_KEY, None if current is None else current.position)
                if self.views.batch(puts, deletes, guards=[guard]):
                    break
            else:
                msg = f"the sealed-secret store kept changing while forgetting{self.where}"
                raise SealedValueUnavailableError(msg)
            self._kek = None
            for session in sessions:
                self._keys.pop(session, None)
            return had

    def _rotated(self, current: ViewRecord | None, gone: set[UUID]) -> dict[str, ViewRecord]:
        """The records of a rotation: a new wrapping key, and every data key not in ``gone``
        re-wrapped under it. Raises SealingKeyError when the user key cannot open them."""
        from cryptography.exceptions import InvalidTag

        user = self._user_key(create=False)
        old_kek: bytes | None = None
        if current is not None:
            try:
                old_kek = _decrypt(user.material, current.data, _wrap_aad(current.position))
            except _NotOpened:
                raise SealingKeyError(self._wrong_key_message(user, "this store")) from None
        generation = 1 if current is None else current.position + 1
        new_kek = os.urandom(32)
        puts = {
            _WRAP_KEY: ViewRecord(
                generation, _encrypt(user.material, new_kek, _wrap_aad(generation))
            )
        }
        slots = [k for k in self.views.keys(_PREFIX) if k.endswith("/key") and k != _WRAP_KEY]
        # One cipher object per key for the whole pass (10k sessions: bench/forget.py).
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        sealer = AESGCM(new_kek)
        openers = {0: AESGCM(user.material)}
        if current is not None and old_kek is not None:
            openers[current.position] = AESGCM(old_kek)
        for slot, record in self.views.get_many(slots).items():
            session = UUID(slot[len(_PREFIX) : -len("/key")])
            opener = openers.get(record.position)
            if session in gone or opener is None:
                continue  # forgotten, or wrapped under a key this store no longer has
            aad = _data_key_aad(session)
            try:
                key = opener.decrypt(record.data[:12], record.data[12:], aad)
            except InvalidTag:
                raise SealingKeyError(self._wrong_key_message(user, f"session {session}")) from None
            nonce = os.urandom(12)
            puts[slot] = ViewRecord(generation, nonce + sealer.encrypt(nonce, key, aad))
        return puts

    def forgotten(self, session: UUID) -> bool:
        return self.views.get(f"{_PREFIX}{session}/forgotten") is not None


@dataclass(frozen=True)
class Sealing:
    """What redaction at record time needs: what to find, and where sealed values go."""

    redactor: Redactor
    vault: SecretVault
    _forms: dict[UUID, dict[str, str]] = field(default_factory=dict, compare=False, repr=False)
    """Stored forms of blobs sealed per session, until an event of it names them."""
    _forms_lock: threading.Lock = field(default_factory=threading.Lock, compare=False, repr=False)

    def __deepcopy__(self, memo: dict[int, Any]) -> Sealing:
        # A service, not a value: a session copied from the repository's cache records through
        # the same vault as the one it was copied from.
        return self

    def redact_kwargs(self, session: UUID, kwargs: dict[str, Any]) -> dict[str, Any]:
        return self.redactor.redact_kwargs(kwargs, self.vault.sealer(session))

    def note_stored_form(self, scope: UUID, digest: str, stored_digest: str) -> None:
        with self._forms_lock:
            self._forms.setdefault(scope, {})[digest] = stored_digest

    def take_stored_forms(self, session: UUID, fields: dict[str, Any]) -> dict[str, str]:
        """The stored-form digests of the sealed blobs ``fields`` name (digest -> sha256 of the
        redacted form), no longer pending: the event about to be recorded carries them."""
        if not self._forms:
            return {}
        with self._forms_lock:
            pending = self._forms.get(session)
            if not pending:
                return {}
            named = {d for d in _digests_in(fields) if d in pending}
            taken = {d: pending.pop(d) for d in sorted(named)}
            if not pending:
                del self._forms[session]
            return taken

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


def _digests_in(value: Any) -> Iterator[str]:
    """Every sha256 hex digest among the strings of ``value`` (a blob reference)."""
    if isinstance(value, str):
        if len(value) == 64 and all(c in "0123456789abcdef" for c in value):
            yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _digests_in(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _digests_in(v)


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
