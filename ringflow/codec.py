"""Call data encrypted at rest in Temporal: an AES-GCM payload codec with rotatable keys.

Temporal stores every payload (workflow input, signals, updates, query answers, activity
arguments and results) in its history, and a call's payloads are full of personal data:
transcripts, variables such as a patient's name, phone numbers, HTTP results. The codec
encrypts each payload on the client/worker side, so the server, its database and anyone
reading history with the plain ``temporal`` CLI see ciphertext; ops read calls decoded
through ``ringflow codec-server`` (Temporal's Codec Server protocol) from the UI or CLI.

Keys form a ring: the first (primary) key encrypts, every key decrypts, and each payload
names its key id in its metadata. Rotating a key is adding a new one in front and keeping
the old ones for as long as calls written with them may still be read.

Each payload is compressed before it is encrypted, when that makes it smaller
(``ringflow/compression.py``: ciphertext does not compress, and a call's history is mostly
JSON). Payloads without the encryption marker pass through decoding untouched, and so do
ones without the compression marker: histories written before encryption, or compression,
was turned on (and the saved replay histories in ``tests/histories``) still load. Search
attributes never pass through a codec (Temporal indexes them), which is why Ringflow's carry
no personal data.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from temporalio.api.common.v1 import Payload
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import DataConverter, DefaultFailureConverterWithEncodedAttributes, PayloadCodec

from ringflow import compression
from ringflow.flow_codec import FlowRefCodec
from ringflow.settings import Settings

ENCODING = b"binary/encrypted"
KEY_ID = "encryption-key-id"
NONCE_BYTES = 12
KEY_ID_RE = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
KEY_FILE_NAME = "codec.keys"
# Set on a payload the codec decrypted, when asked (the worker's, ringflow/input_guard.py):
# only on the decoded copy in memory, never stored.
DECRYPTED = "ringflow-decrypted"


class CodecKeyError(ValueError):
    """A key is malformed, missing or unknown; the message names which one and where."""


@dataclass(frozen=True)
class Keyring:
    """Key id -> 256-bit AES key; ``primary`` encrypts, all of them decrypt."""

    keys: dict[str, bytes]
    primary: str
    source: str = "settings"

    def __post_init__(self) -> None:
        if self.primary not in self.keys:
            raise CodecKeyError(f"{self.source}: primary key {self.primary!r} is not in the ring")


def generate_key() -> str:
    """A fresh AES-256 key, base64 (what ``RINGFLOW_CODEC_KEYS`` and key files hold)."""
    return base64.b64encode(AESGCM.generate_key(bit_length=256)).decode()


def parse_keys(text: str, source: str) -> Keyring:
    """``id:base64key`` entries separated by commas or new lines, primary first.

    ``#`` starts a comment line in a key file. Errors name the entry's position, never
    the key material.
    """
    entries = [
        e.strip()
        for line in text.splitlines()
        if not line.lstrip().startswith("#")
        for e in line.split(",")
        if e.strip()
    ]
    if not entries:
        raise CodecKeyError(f"{source}: no keys (expected id:base64key entries, primary first)")
    keys: dict[str, bytes] = {}
    for n, entry in enumerate(entries, 1):
        key_id, sep, material = entry.partition(":")
        key_id = key_id.strip()
        if not sep or not KEY_ID_RE.match(key_id):
            raise CodecKeyError(
                f"{source}: entry {n} is not id:base64key with an id of letters, digits, '.', '_' or '-'"
            )
        try:
            key = base64.b64decode(material.strip(), validate=True)
        except (binascii.Error, ValueError):
            raise CodecKeyError(f"{source}: key {key_id!r} is not valid base64") from None
        if len(key) != 32:
            raise CodecKeyError(f"{source}: key {key_id!r} has {len(key)} bytes, AES-256 needs 32")
        if key_id in keys:
            raise CodecKeyError(f"{source}: key id {key_id!r} appears twice")
        keys[key_id] = key
    return Keyring(keys=keys, primary=next(iter(keys)), source=source)


def read_key_file(path: Path) -> Keyring:
    try:
        text = path.read_text()
    except OSError as err:
        raise CodecKeyError(f"cannot read key file {path}: {err.strerror or err}") from None
    return parse_keys(text, str(path))


def create_key_file(path: Path) -> Keyring:
    """A new key file holding one fresh key, readable by its owner only; kept if it exists."""
    if path.exists():
        return read_key_file(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write("# Ringflow payload keys (id:base64 AES-256), primary first; keep old ones for old calls\n")
        f.write(f"local-1:{generate_key()}\n")
    return read_key_file(path)


class EncryptionCodec(PayloadCodec):
    """AES-256-GCM over each whole serialized payload, its key id in the outer metadata;
    the payload deflated first when that makes it smaller (``compress``, on by default).

    Without keys (encryption off) nothing is compressed either: the payloads stay the plain
    JSON an operator turned encryption off to read. Decoding inflates a compressed payload
    whether it came encrypted or not, so the codec server and every reader decode both."""

    def __init__(
        self, keyring: Keyring | None, *, mark_decrypted: bool = False, compress: bool = True
    ) -> None:
        self.keyring = keyring
        self.mark_decrypted = mark_decrypted
        self.compress = compress
        self._ciphers = {k: AESGCM(v) for k, v in keyring.keys.items()} if keyring else {}

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.encrypt(p) for p in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.decrypt(p) for p in payloads]

    def encrypt(self, payload: Payload) -> Payload:
        if self.keyring is None:  # encryption turned off (RINGFLOW_ENCRYPTION=0)
            return payload
        key_id = self.keyring.primary
        nonce = os.urandom(NONCE_BYTES)
        packed = compression.compress(payload) if self.compress else payload
        # The key id is authenticated too: a payload cannot be relabelled to another key.
        sealed = self._ciphers[key_id].encrypt(nonce, packed.SerializeToString(), key_id.encode())
        return Payload(metadata={"encoding": ENCODING, KEY_ID: key_id.encode()}, data=nonce + sealed)

    def decrypt(self, payload: Payload) -> Payload:
        if payload.metadata.get("encoding") != ENCODING:
            # written unencrypted (older calls, saved histories): passed through, inflated if
            # compressed; never marked as decrypted (ringflow/input_guard.py)
            return compression.inflate(payload)
        key_id = payload.metadata.get(KEY_ID, b"").decode(errors="replace")
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            known = ", ".join(sorted(self._ciphers)) or "none configured"
            raise CodecKeyError(
                f"payload encrypted with key {key_id!r}, which is not in the key ring "
                f"({known}); set RINGFLOW_CODEC_KEYS or RINGFLOW_CODEC_KEY_FILE"
            )
        data = payload.data
        try:
            plain = cipher.decrypt(data[:NONCE_BYTES], data[NONCE_BYTES:], key_id.encode())
        except Exception:  # InvalidTag: wrong key material under this id, or tampered data
            raise CodecKeyError(
                f"payload under key {key_id!r} does not decrypt: wrong key or tampered data"
            ) from None
        out = Payload()
        out.ParseFromString(plain)
        out = compression.inflate(out)  # a bomb is refused here even under a valid key
        if self.mark_decrypted:
            out.metadata[DECRYPTED] = b"1"
        return out


def data_converter(codec: PayloadCodec | None) -> DataConverter:
    """Ringflow's converter: pydantic payloads, published flow definitions taken out
    (``ringflow/flow_codec.py``), then ``codec``; failure messages and stack traces are
    moved into an encoded payload too, since an error can quote call data."""
    if codec is None:
        return replace(pydantic_data_converter, payload_codec=FlowRefCodec())
    return replace(
        pydantic_data_converter,
        payload_codec=FlowRefCodec(codec),
        failure_converter_class=DefaultFailureConverterWithEncodedAttributes,
    )


def keyring_from_settings(settings: Settings) -> Keyring | None:
    """The configured keys: ``codec_keys``, else ``codec_key_file``, else the key ``ringflow dev``
    keeps in ``data_dir`` (:func:`local_key_file`: the same place from any folder, so the CLI
    reads the calls of a dev stack started elsewhere); None when encryption is off or no key
    is found anywhere."""
    if not settings.encryption:
        return None
    if settings.codec_keys is not None and settings.codec_keys.get_secret_value().strip():
        return parse_keys(settings.codec_keys.get_secret_value(), "RINGFLOW_CODEC_KEYS")
    if settings.codec_key_file is not None:
        return read_key_file(settings.codec_key_file)
    local = local_key_file(settings)
    return read_key_file(local) if local.is_file() else None


def local_key_file(settings: Settings) -> Path:
    """Where ``ringflow dev`` keeps its key and every process looks for one last."""
    return (settings.data_dir / KEY_FILE_NAME).expanduser().absolute()


def require_keyring(settings: Settings) -> Keyring | None:
    """For every process that talks to Temporal about calls (worker, agent, the CLI, the
    simulator on a server of its own): with encryption on, running without a key would put
    personal data in Temporal in clear, or fail to read it, so refuse, saying where the key
    was looked for."""
    ring = keyring_from_settings(settings)
    if ring is None and settings.encryption:
        raise CodecKeyError(
            "payload encryption is on but no key was found: RINGFLOW_CODEC_KEYS and "
            f"RINGFLOW_CODEC_KEY_FILE are unset and {local_key_file(settings)} does not exist "
            "(RINGFLOW_DATA_DIR moves it; `ringflow dev` creates it, `ringflow codec-key` prints "
            "a key); set one of them, or RINGFLOW_ENCRYPTION=0 to run without encryption"
        )
    return ring


def ephemeral_codec(settings: Settings) -> EncryptionCodec:
    """For a Temporal server that lives and dies with this process (the simulators' embedded
    one): a key made now and never written, so its calls are encrypted like any others and
    need no configured key. Off with ``RINGFLOW_ENCRYPTION=0``."""
    if not settings.encryption:
        return EncryptionCodec(None)
    ring = parse_keys(f"ephemeral:{generate_key()}", "an embedded server's own key")
    return EncryptionCodec(ring, compress=settings.payload_compression)


def codec_from_settings(settings: Settings) -> EncryptionCodec:
    """Always a codec, even without keys: it still decodes nothing it cannot, clearly."""
    return EncryptionCodec(keyring_from_settings(settings), compress=settings.payload_compression)
