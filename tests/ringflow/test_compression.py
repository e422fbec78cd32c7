"""Payloads are deflated before they are encrypted, and a hostile one cannot hurt a reader.

The codec's own behaviour first (a compressed payload round-trips, small ones and ones
written before compression pass untouched, a decompression bomb or a corrupt stream is
refused with its reason), then the places that decode input: the codec server answers a
bomb with an error, and a call signalled a bomb by a client holding the keys records the
signal as rejected and goes on, with no workflow task failed (a failing task is retried
forever).
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Sequence

import httpx
import pytest
from google.protobuf import json_format
from temporalio.api.common.v1 import Payload, Payloads
from temporalio.api.enums.v1 import EventType
from temporalio.converter import PayloadCodec
from temporalio.exceptions import ApplicationError

from ringflow import compression
from ringflow.codec import (
    ENCODING,
    EncryptionCodec,
    Keyring,
    codec_from_settings,
    generate_key,
    keyring_from_settings,
    parse_keys,
)
from ringflow.devstack import DevStack, free_port
from ringflow.input_guard import PAYLOAD_REFUSED, GuardedPayloadConverter
from ringflow.servers.codec import build_app, start
from ringflow.settings import Settings, get_settings
from ringflow.temporal_setup import connect
from ringflow.workflows.client import CallHandle
from tests.support.wfkit import Agent, running_worker, wait_state
from tests.support.wfkit import start as start_call

pytestmark = pytest.mark.asyncio(loop_scope="session")

TRANSCRIPT = json.dumps(
    {"turns": [{"role": "user", "text": f"turn {n}: I would like to move my appointment"} for n in range(40)]}
).encode()


def keyring() -> Keyring:
    return parse_keys(f"k1:{generate_key()}", "test")


def json_payload(data: bytes) -> Payload:
    return Payload(metadata={"encoding": b"json/plain"}, data=data)


def deflated(plain: bytes) -> bytes:
    packer = zlib.compressobj(6, zlib.DEFLATED, -15)
    return packer.compress(plain) + packer.flush()


def bomb() -> Payload:
    """A payload of 5 MiB of JSON spaces, 5 KB compressed: past the codec's 4 MiB bound."""
    inner = json_payload(b" " * (5 * 1024 * 1024) + b"1").SerializeToString()
    return Payload(metadata={"encoding": compression.ENCODING}, data=deflated(inner))


async def test_a_compressed_payload_round_trips_and_is_smaller() -> None:
    ring = keyring()
    codec = EncryptionCodec(ring)
    original = json_payload(TRANSCRIPT)
    [sealed] = await codec.encode([original])
    assert sealed.metadata["encoding"] == ENCODING
    assert sealed.ByteSize() < original.ByteSize() / 3  # deflated before it was encrypted
    [back] = await codec.decode([sealed])
    assert back == original
    # inside the ciphertext: the compressed payload, marked by its own encoding
    cipher = codec._ciphers["k1"]
    inner = Payload()
    inner.ParseFromString(cipher.decrypt(sealed.data[:12], sealed.data[12:], b"k1"))
    assert inner.metadata["encoding"] == compression.ENCODING


async def test_small_payloads_and_payloads_written_before_compression_pass_untouched() -> None:
    ring = keyring()
    small = json_payload(b'"hi"')
    assert compression.compress(small) is small  # nothing to gain
    old_codec = EncryptionCodec(ring, compress=False)  # what every history recorded before holds
    [old] = await old_codec.encode([json_payload(TRANSCRIPT)])
    codec = EncryptionCodec(ring)
    assert await codec.decode([old]) == [json_payload(TRANSCRIPT)]
    plain = json_payload(TRANSCRIPT)  # unencrypted (RINGFLOW_ENCRYPTION=0, tests/histories)
    assert await codec.decode([plain]) == [plain]
    # without keys nothing is compressed either: the payloads an operator turned encryption off to read
    assert await EncryptionCodec(None).encode([plain]) == [plain]


@pytest.mark.parametrize(
    ("payload", "why"),
    [
        (bomb(), "inflates past"),
        (Payload(metadata={"encoding": compression.ENCODING}, data=b"\xff not deflate"), "corrupt"),
        (
            Payload(metadata={"encoding": compression.ENCODING}, data=deflated(b"x" * 400)[:-3]),
            "truncated",
        ),
        (
            Payload(metadata={"encoding": compression.ENCODING}, data=deflated(b"\xff" * 400)),
            "not inflate to",
        ),
    ],
)
async def test_a_bomb_or_a_broken_stream_is_refused_with_its_reason(payload: Payload, why: str) -> None:
    ring = keyring()
    codec = EncryptionCodec(ring, mark_decrypted=True)
    [sealed] = await EncryptionCodec(ring, compress=False).encode([payload])  # under a valid key
    [out] = await codec.decode([sealed])
    reason = compression.refused_reason(out)
    assert reason is not None and why in reason
    assert len(out.data) < 1000
    # a worker's converter refuses it by name, not with an unknown-encoding error
    with pytest.raises(ApplicationError) as err:
        GuardedPayloadConverter().from_payloads([out])
    assert err.value.type == PAYLOAD_REFUSED and err.value.non_retryable and why in err.value.message


async def test_the_codec_server_decodes_compressed_payloads_and_refuses_a_bomb() -> None:
    ring = keyring()
    codec = EncryptionCodec(ring)
    port = free_port()
    runner = await start(build_app(codec, token=None, cors_origins=[]), "127.0.0.1", port)

    def body(*payloads: Payload) -> dict[str, object]:
        return {"payloads": [json.loads(json_format.MessageToJson(p)) for p in payloads]}

    try:
        async with httpx.AsyncClient() as http:
            url = f"http://127.0.0.1:{port}/decode"
            [sealed] = await codec.encode([json_payload(TRANSCRIPT)])
            ok = await http.post(url, json=body(sealed))
            assert ok.status_code == 200
            [shown] = json_format.ParseDict(ok.json(), Payloads()).payloads
            assert shown.data == TRANSCRIPT
            [sealed_bomb] = await EncryptionCodec(ring, compress=False).encode([bomb()])
            refused = await http.post(url, json=body(sealed_bomb))
            assert refused.status_code == 422 and "inflates past" in refused.json()["error"]
    finally:
        await runner.cleanup()


class BombingCodec(PayloadCodec):
    """A client holding the keys that sends a decompression bomb in place of each payload."""

    def __init__(self, ring: Keyring) -> None:
        self.codec = EncryptionCodec(ring, compress=False)

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return await self.codec.encode([bomb() for _ in payloads])

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return await self.codec.decode(payloads)


async def test_a_bomb_signalled_to_a_call_is_rejected_without_failing_a_workflow_task(
    temporal_server: DevStack, task_queue: str, sqlite_url: str
) -> None:
    ring = keyring_from_settings(get_settings())
    assert ring is not None  # tests/conftest.py sets RINGFLOW_CODEC_KEYS
    worker_client = await connect(
        temporal_server.address, temporal_server.namespace, refuse_plaintext_inputs=True
    )
    hostile = await connect(temporal_server.address, temporal_server.namespace, codec=BombingCodec(ring))
    async with running_worker(worker_client, task_queue, sqlite_url):
        call = await start_call(worker_client, task_queue)
        await wait_state(call, lambda s: s.status == "dialing")
        await Agent(CallHandle(hostile, call.call_id)).say(("user", "hello"))  # its payload: the bomb
        st = await wait_state(call, lambda s: bool(s.rejected), what="the bomb recorded as rejected")
        assert "unreadable payload" in st.rejected[-1].reason
        assert st.status == "dialing"  # the call goes on
        await call.hangup("user_hangup")
        await wait_state(call, lambda s: s.status == "ended")
        events = [e.event_type async for e in call.handle.fetch_history_events()]
    assert EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED not in events


async def test_payload_compression_off_encrypts_uncompressed_and_still_reads_compressed() -> None:
    """RINGFLOW_PAYLOAD_COMPRESSION=0, for a fleet upgrading from a release that cannot read
    compressed payloads: nothing new is compressed, what others compressed still decodes."""
    keys = f"k1:{generate_key()}"
    off = codec_from_settings(Settings(codec_keys=keys, payload_compression=False))
    on = codec_from_settings(Settings(codec_keys=keys))
    assert on.compress and not off.compress
    original = json_payload(TRANSCRIPT)
    [plain_sealed] = await off.encode([original])
    [packed_sealed] = await on.encode([original])
    assert plain_sealed.ByteSize() > 2 * packed_sealed.ByteSize()
    assert await off.decode([packed_sealed]) == await on.decode([plain_sealed]) == [original]
