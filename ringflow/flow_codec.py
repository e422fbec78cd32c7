"""Flow definitions out of Temporal's history: a claim check keyed by the published version.

A call's input, the snapshot an attaching agent gets, a continue-as-new input and a
campaign's child inputs all hold the call's flow definition, which is most of their bytes
(a 6-turn call's history held it twice). When such a payload also names its published version
(``flow_ref``, ``ringflow.contract.flow_ref.FlowRef``) and its definition is the published
one, encoding drops the definition and marks the payload with the version; decoding puts the
published definition back. Workflow code sees the whole definition either way, so nothing
in it changes, and a replay decodes the same bytes every time: a version is immutable and
content-addressed, so the read is deterministic and is cached for the life of the process.

A journey's input holds its definition as ``flow``: it is taken out the same way, and the
payload says so (``SLOT_KEY``), so decoding puts it back there.

This is Temporal's claim-check pattern (a ``PayloadCodec`` that swaps a payload's bulk for a
key in another store) with content addressing: a thousand calls of one version share one row
(``activities/flow_store.py``). A definition that differs from the published one (an MCP
pin, fixed into it at the call's start) is left in the payload. Payloads without the marker
(every history recorded before, and calls started from a bare definition) pass untouched.

Where the versions are read from: the databases this process already used for them (a
``flow publish`` in the same process, a worker's), else ``RINGFLOW_DATABASE_URL``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence

from temporalio.api.common.v1 import Payload
from temporalio.converter import PayloadCodec

from ringflow.settings import get_settings

REF_KEY = "ringflow-flow-ref"  # metadata: the version whose definition was taken out
SOURCE_KEY = "ringflow-flow-source"  # metadata: the payload's own ``source``, if any
# metadata: the key the definition was taken from when it is not ``definition`` (a journey's
# input holds it as ``flow``)
SLOT_KEY = "ringflow-flow-slot"
SLOTS = ("definition", "flow")
_MIN_BYTES = 2048  # a payload this small holds no definition worth taking out
_NEEDLE = b'"flow_ref":{'


class FlowVersionMissing(RuntimeError):
    """A payload names a version no known database holds."""


async def _content(version: str) -> tuple[str, str | None]:
    """The version's content, from this process's cache or the first database that holds it:
    the ones this process used for versions, newest first, then ``RINGFLOW_DATABASE_URL``. A
    database that cannot be read now (one a process used once and that is gone) is passed
    over for the next; the error says how many were.

    The flow store (SQLAlchemy, the flow model) is imported here, at the first payload that
    names a version: every client has this codec, and one that meets no such payload
    (``ringflow call list``, a visibility query) does without it
    (tests/ringflow/test_cli_startup.py)."""
    from ringflow.activities import flow_store

    found = flow_store.cached_content(version)
    if found is not None:
        return found
    urls = [*reversed(flow_store.known_stores()), get_settings().database_url]
    unreadable = 0
    for url in dict.fromkeys(urls):
        try:
            got = await asyncio.to_thread(flow_store.load_content, url, version)
        except Exception:  # any driver's error: this store is not the answer now
            unreadable += 1
            continue
        if got is not None:
            flow_store.remember_content(version, *got)
            return got
    why = f"; {unreadable} of them could not be read" if unreadable else ""
    raise FlowVersionMissing(
        f"flow version {version} is not published in the database this process uses "
        f"(RINGFLOW_DATABASE_URL): the worker, the agent and the client must share it{why}"
    )


class FlowRefCodec(PayloadCodec):
    """Takes a published definition out of a payload (encode) and puts it back (decode),
    around ``inner`` (the encryption codec): out before encryption, back after decryption."""

    def __init__(self, inner: PayloadCodec | None = None) -> None:
        self.inner = inner

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        out = [await self.strip(p) for p in payloads]
        return await self.inner.encode(out) if self.inner is not None else out

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        plain = await self.inner.decode(payloads) if self.inner is not None else list(payloads)
        return [await self.expand(p) for p in plain]

    async def strip(self, payload: Payload) -> Payload:
        if (
            payload.metadata.get("encoding") != b"json/plain"
            or len(payload.data) < _MIN_BYTES
            or _NEEDLE not in payload.data
        ):
            return payload
        try:
            obj = json.loads(payload.data)
        except ValueError:
            return payload
        if not isinstance(obj, dict):
            return payload
        ref = obj.get("flow_ref")
        slot = next((k for k in SLOTS if isinstance(obj.get(k), dict)), None)
        if not isinstance(ref, dict) or slot is None or not isinstance(ref.get("version"), str):
            return payload
        definition = obj[slot]
        try:
            content, _ = await _content(ref["version"])
        except FlowVersionMissing:
            return payload  # kept whole: a reader without the version still reads it
        from ringflow.activities.flow_store import content_of  # imported by _content already

        if content_of(definition) != content:
            return payload  # not the published definition (an MCP pin): kept whole
        source = definition.get("source")
        del obj[slot]
        out = Payload(metadata=dict(payload.metadata), data=json.dumps(obj, separators=(",", ":")).encode())
        out.metadata[REF_KEY] = ref["version"].encode()
        if slot != "definition":
            out.metadata[SLOT_KEY] = slot.encode()
        if isinstance(source, str):
            out.metadata[SOURCE_KEY] = source.encode()
        return out

    async def expand(self, payload: Payload) -> Payload:
        version = payload.metadata.get(REF_KEY)
        if version is None:
            return payload
        content, stored_source = await _content(version.decode())
        own = payload.metadata.get(SOURCE_KEY)
        source = own.decode() if own is not None else stored_source
        definition = content[:-1] + ("," if content != "{}" else "") + f'"source":{json.dumps(source)}}}'
        data = payload.data.rstrip()
        if not data.endswith(b"}"):
            raise FlowVersionMissing(
                f"a payload marked with flow version {version.decode()} is not a JSON object"
            )
        sep = b"," if data != b"{}" else b""
        slot = payload.metadata.get(SLOT_KEY, b"definition")
        meta = {k: v for k, v in payload.metadata.items() if k not in (REF_KEY, SOURCE_KEY, SLOT_KEY)}
        return Payload(metadata=meta, data=data[:-1] + sep + b'"' + slot + b'":' + definition.encode() + b"}")
