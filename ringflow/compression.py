"""Payloads compressed before they are encrypted: most of a call's history is JSON.

A call's Temporal history is mostly its payloads (function results, turn signals, the call
record, extraction inputs), each a JSON document of repeated keys and prose that deflate
shrinks three to four times. Encrypted bytes do not compress, so the payload codec
(``ringflow/codec.py``) compresses a payload's serialized bytes first and encrypts the result.

A compressed payload is a payload of its own encoding (:data:`ENCODING`) whose data is the
original payload, metadata included, deflated: nothing about the original is lost, and a
payload without that encoding (every history recorded before, ``tests/histories``, and
small payloads that deflate would not shrink) decodes untouched.

Decoding is given input (anyone who can write to the namespace writes payloads), so it is
bounded: a payload inflating past :data:`MAX_INFLATED` bytes (a decompression bomb), or one
that does not inflate to a payload, is not decoded. It is replaced by a payload of the
encoding :data:`REFUSED` naming why, which no converter reads: the workflow, whose inputs
all arrive raw, refuses it as malformed (a rejected signal or update, a failed start) and
its workflow task does not fail in a loop, as an exception from the codec would make it.
The codec server answers such a payload with an error (``ringflow/servers/codec.py``).
"""

from __future__ import annotations

import zlib

from google.protobuf.message import DecodeError
from temporalio.api.common.v1 import Payload

ENCODING = b"binary/deflate"  # data: the whole serialized payload, raw deflate (RFC 1951)
REFUSED = b"binary/ringflow-refused"  # data: why the payload was not decoded
REASON = "ringflow-refused"  # metadata of a refused payload: the same reason
MIN_BYTES = 128  # below this, deflate's gain does not pay for the wrapper's metadata
# Temporal refuses payloads over 2 MB (its blob size limit); nothing larger is compressed,
# so nothing legitimately inflates past it, and the bound is twice that.
MAX_INFLATED = 4 * 1024 * 1024
LEVEL = 6  # zlib's default: level 9 saves under 1% on these payloads for twice the time
_WBITS = -15  # raw deflate: no zlib header or checksum (AES-GCM authenticates the bytes)


def compress(payload: Payload) -> Payload:
    """``payload`` deflated under :data:`ENCODING`, or itself when that would not be smaller."""
    plain = payload.SerializeToString()
    if len(plain) < MIN_BYTES or len(plain) > MAX_INFLATED:
        return payload
    deflater = zlib.compressobj(LEVEL, zlib.DEFLATED, _WBITS)
    packed = Payload(metadata={"encoding": ENCODING}, data=deflater.compress(plain) + deflater.flush())
    return packed if packed.ByteSize() < len(plain) else payload


def refused(reason: str) -> Payload:
    """A payload standing for one that was not decoded; its converter error names the encoding."""
    return Payload(metadata={"encoding": REFUSED, REASON: reason.encode()}, data=reason.encode())


def refused_reason(payload: Payload) -> str | None:
    """Why ``payload`` was not decoded, if it stands for one that was not."""
    if payload.metadata.get("encoding") != REFUSED:
        return None
    return payload.metadata.get(REASON, b"").decode(errors="replace") or "refused"


def inflate(payload: Payload) -> Payload:
    """The payload ``payload`` compressed, or ``payload`` itself without :data:`ENCODING`;
    never more than :data:`MAX_INFLATED` bytes of output, never an exception (see above)."""
    if payload.metadata.get("encoding") != ENCODING:
        return payload
    inflater = zlib.decompressobj(_WBITS)
    try:
        plain = inflater.decompress(payload.data, MAX_INFLATED)
    except zlib.error:
        return refused("a compressed payload is corrupt: it does not inflate")
    if inflater.unconsumed_tail:
        return refused(
            f"a compressed payload inflates past {MAX_INFLATED} bytes (the codec's bound; "
            "Temporal refuses payloads over 2 MB): not decoded"
        )
    if not inflater.eof or inflater.unused_data:
        return refused("a compressed payload is truncated or has trailing bytes: not decoded")
    out = Payload()
    try:
        out.ParseFromString(plain)
    except DecodeError:
        return refused("a compressed payload does not inflate to a payload: not decoded")
    return out
