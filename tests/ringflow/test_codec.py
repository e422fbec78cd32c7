"""Call data is encrypted at rest in Temporal and readable only through Ringflow's codec.

A real call runs on the real dev server; its history is read back with the plain
``temporal`` CLI (what anyone with server access sees) and through ``ringflow
codec-server``'s HTTP protocol, as the Temporal UI and ``temporal --codec-endpoint`` do.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from google.protobuf import json_format
from temporalio.api.common.v1 import Payload
from temporalio.client import Client, WorkflowHistory
from temporalio.worker import Replayer

from ringflow.codec import (
    ENCODING,
    KEY_ID,
    CodecKeyError,
    EncryptionCodec,
    Keyring,
    data_converter,
    generate_key,
    keyring_from_settings,
    parse_keys,
    require_keyring,
)
from ringflow.devstack import DevStack, find_temporal_binary, free_port
from ringflow.servers.codec import build_app, start
from ringflow.settings import Settings
from ringflow.temporal_setup import connect
from ringflow.workflows.call import CallWorkflow
from tests.support.paths import TESTS
from tests.support.wfkit import Agent, running_worker, wait_state, wait_until
from tests.support.wfkit import start as start_clinic_call

SECRET_NAME = "Zephyrine Quackenbush"
SECRET_PHONE = "+15557654321"
SECRET_TEXT = "my pharmacy login is marmalade-umbrella"
TOKEN = "codec-test-token"
UI_ORIGIN = "http://localhost:8233"
HISTORIES = TESTS / "histories"


def ring(*ids: str, keys: dict[str, str]) -> Keyring:
    return parse_keys(",".join(f"{i}:{keys[i]}" for i in ids), "test")


@pytest.fixture(scope="module")
def keys() -> dict[str, str]:
    return {"k1": generate_key(), "k2": generate_key()}


# -- the codec itself ----------------------------------------------------------------------


async def test_round_trip_names_the_key_and_hides_the_text(keys: dict[str, str]) -> None:
    codec = EncryptionCodec(ring("k1", keys=keys))
    plain = Payload(metadata={"encoding": b"json/plain"}, data=json.dumps(SECRET_TEXT).encode())
    [sealed] = await codec.encode([plain])
    assert sealed.metadata["encoding"] == ENCODING and sealed.metadata[KEY_ID] == b"k1"
    assert SECRET_TEXT.encode() not in sealed.data
    assert await codec.decode([sealed]) == [plain]


async def test_unencrypted_payloads_pass_through_decoding(keys: dict[str, str]) -> None:
    plain = Payload(metadata={"encoding": b"json/plain"}, data=b'"hello"')
    assert await EncryptionCodec(ring("k1", keys=keys)).decode([plain]) == [plain]
    assert await EncryptionCodec(None).decode([plain]) == [plain]


async def test_rotation_old_payloads_decode_with_a_new_primary(keys: dict[str, str]) -> None:
    plain = Payload(metadata={"encoding": b"json/plain"}, data=b'"x"')
    [old] = await EncryptionCodec(ring("k1", keys=keys)).encode([plain])
    rotated = EncryptionCodec(ring("k2", "k1", keys=keys))
    [new] = await rotated.encode([plain])
    assert new.metadata[KEY_ID] == b"k2"
    assert await rotated.decode([old, new]) == [plain, plain]
    with pytest.raises(CodecKeyError, match="'k1', which is not in the key ring"):
        await EncryptionCodec(ring("k2", keys=keys)).decode([old])


async def test_tampered_or_relabelled_payloads_are_refused(keys: dict[str, str]) -> None:
    codec = EncryptionCodec(ring("k1", "k2", keys=keys))
    [sealed] = await codec.encode([Payload(metadata={"encoding": b"json/plain"}, data=b'"x"')])
    flipped = Payload(metadata=dict(sealed.metadata), data=sealed.data[:-1] + bytes([sealed.data[-1] ^ 1]))
    relabelled = Payload(metadata={**sealed.metadata, KEY_ID: b"k2"}, data=sealed.data)
    for bad in (flipped, relabelled):
        with pytest.raises(CodecKeyError, match="does not decrypt"):
            await codec.decode([bad])


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("", "no keys"),
        ("k1", "entry 1 is not id:base64key"),
        ("k 1:AAAA", "entry 1 is not id:base64key"),
        ("k1:not-base64!", "'k1' is not valid base64"),
        (f"k1:{base64.b64encode(b'short').decode()}", "'k1' has 5 bytes, AES-256 needs 32"),
    ],
)
def test_bad_keys_are_named_without_their_material(text: str, error: str) -> None:
    with pytest.raises(CodecKeyError, match=error) as info:
        parse_keys(text, "RINGFLOW_CODEC_KEYS")
    assert str(info.value).startswith("RINGFLOW_CODEC_KEYS: ")


def test_duplicate_ids_and_key_file_with_comments(tmp_path: Path, keys: dict[str, str]) -> None:
    with pytest.raises(CodecKeyError, match="'k1' appears twice"):
        parse_keys(f"k1:{keys['k1']},k1:{keys['k2']}", "x")
    path = tmp_path / "keys"
    path.write_text(f"# rotated 2026-11\nk2:{keys['k2']}\nk1:{keys['k1']}\n")
    found = keyring_from_settings(Settings(codec_keys=None, codec_key_file=path, data_dir=tmp_path / "x"))
    assert found is not None and found.primary == "k2" and set(found.keys) == {"k1", "k2"}


def test_keys_come_from_settings_and_encryption_is_required(tmp_path: Path, keys: dict[str, str]) -> None:
    bare = Settings(data_dir=tmp_path, codec_keys=None, codec_key_file=None)
    with pytest.raises(CodecKeyError, match="RINGFLOW_CODEC_KEYS"):
        require_keyring(bare)
    assert require_keyring(bare.model_copy(update={"encryption": False})) is None
    from_env = keyring_from_settings(Settings(codec_keys=f"k2:{keys['k2']},k1:{keys['k1']}"))  # type: ignore[arg-type]
    assert from_env is not None and from_env.primary == "k2"


# -- a real call, read as the server stores it and as the UI shows it ----------------------


async def temporal_cli(server: DevStack, *args: str) -> Any:
    """The plain ``temporal`` CLI, without blocking the loop (the codec server runs in it)."""
    proc = await asyncio.create_subprocess_exec(
        str(find_temporal_binary()),
        *args,
        "--address",
        server.address,
        "--namespace",
        server.namespace,
        "--output",
        "json",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    return json.loads(out)


def readable_text(obj: Any) -> str:
    """Everything a reader of the JSON could see: the text, and every base64 field decoded."""
    parts: list[str] = []

    def walk(o: Any) -> None:
        if isinstance(o, dict):
            for v in o.values():
                walk(v)
        elif isinstance(o, list):
            for v in o:
                walk(v)
        elif isinstance(o, str):
            parts.append(o)
            try:
                parts.append(base64.b64decode(o, validate=True).decode("utf-8", "replace"))
            except ValueError:
                pass

    walk(obj)
    return "\n".join(parts)


def payloads_in(obj: Any) -> list[dict[str, Any]]:
    """Every Payload object (``{"metadata": ..., "data": ...}``) in a JSON history, except
    search attributes (indexed by the server, so never encoded by a codec)."""
    found: list[dict[str, Any]] = []

    def walk(o: Any) -> None:
        if isinstance(o, dict):
            if "metadata" in o and "encoding" in o.get("metadata", {}):
                found.append(o)
                return
            for k, v in o.items():
                if k != "searchAttributes":
                    walk(v)
        elif isinstance(o, list):
            for v in o:
                walk(v)

    walk(obj)
    return found


@pytest_asyncio.fixture
async def codec_endpoint(keys: dict[str, str]) -> AsyncIterator[str]:
    port = free_port()
    codec = EncryptionCodec(ring("k2", "k1", keys=keys))
    runner = await start(build_app(codec, token=TOKEN, cors_origins=[UI_ORIGIN]), "127.0.0.1", port)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def run_private_call(client: Client, task_queue: str, sqlite_url: str) -> str:
    async with running_worker(client, task_queue, sqlite_url):
        call = await start_clinic_call(
            client, task_queue, variables={"patient": SECRET_NAME}, caller_number=SECRET_PHONE
        )
        agent = Agent(call)
        await agent.say(("user", SECRET_TEXT))
        await agent.transition("verify", "wrong_person")
        record = await wait_until(lambda: call.handle.result(), timeout=60, what="call result")
        st = await wait_state(call, lambda s: s.status == "ended")
    assert record.transcript[-1]["text"] == SECRET_TEXT and st.variables["patient"] == SECRET_NAME
    return call.handle.id


def is_patch_marker(payload: dict[str, Any]) -> bool:
    if "data" not in payload or base64.b64decode(payload["metadata"]["encoding"]) != b"json/plain":
        return False
    try:
        body = json.loads(base64.b64decode(payload["data"]))
    except ValueError:
        return False
    return isinstance(body, dict) and set(body) == {"id", "deprecated"}


async def test_history_is_ciphertext_to_the_plain_cli_and_clear_through_the_codec_server(
    temporal_server: DevStack, task_queue: str, sqlite_url: str, keys: dict[str, str], codec_endpoint: str
) -> None:
    old = await connect(temporal_server.address, codec=EncryptionCodec(ring("k1", keys=keys)))
    wf_id = await run_private_call(old, task_queue, sqlite_url)

    history = await temporal_cli(temporal_server, "workflow", "show", "-w", wf_id)
    seen = readable_text(history)
    assert "CallWorkflow" in seen and wf_id in seen  # we are looking at the right history
    for secret in (SECRET_NAME, SECRET_PHONE, SECRET_TEXT):
        assert secret not in seen, f"{secret!r} readable in plain history"
    # The SDK's core writes a `workflow.patched` marker's details itself, past the codec: only
    # the patch id, no call data. Every other payload with data must be ciphertext.
    payloads = [p for p in payloads_in(history) if not is_patch_marker(p)]
    assert payloads and all(
        base64.b64decode(p["metadata"]["encoding"]) == ENCODING for p in payloads if "data" in p
    ), "every payload with data is encrypted"

    # The Temporal UI's protocol, by hand: POST {"payloads": [...]} to .../decode.
    async with httpx.AsyncClient() as http:
        url = f"{codec_endpoint}/default/decode"
        refused = await http.post(url, json={"payloads": payloads})
        assert refused.status_code == 401
        preflight = await http.options(
            url, headers={"Origin": UI_ORIGIN, "Access-Control-Request-Method": "POST"}
        )
        assert preflight.headers["Access-Control-Allow-Origin"] == UI_ORIGIN
        assert "X-Namespace" in preflight.headers["Access-Control-Allow-Headers"]
        other = await http.options(url, headers={"Origin": "http://evil.example"})
        assert "Access-Control-Allow-Origin" not in other.headers
        resp = await http.post(
            url,
            json={"payloads": payloads},
            headers={"Authorization": f"Bearer {TOKEN}", "X-Namespace": "default", "Origin": UI_ORIGIN},
        )
        assert resp.status_code == 200, resp.text
        assert resp.headers["Access-Control-Allow-Origin"] == UI_ORIGIN
        decoded = resp.json()["payloads"]
        assert len(decoded) == len(payloads)
        clear = readable_text(decoded)
        for secret in (SECRET_NAME, SECRET_PHONE, SECRET_TEXT):
            assert secret in clear
        # and back: /encode gives payloads the codec reads again
        enc = await http.post(
            f"{codec_endpoint}/encode",
            json={"payloads": decoded[:1]},
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
        assert base64.b64decode(enc.json()["payloads"][0]["metadata"][KEY_ID]) == b"k2"  # the new primary

    # The same call through the `temporal` CLI pointed at the codec server, as ops would.
    shown = await temporal_cli(
        temporal_server,
        "workflow",
        "show",
        "-w",
        wf_id,
        "--codec-endpoint",
        codec_endpoint,
        "--codec-auth",
        f"Bearer {TOKEN}",
    )
    assert SECRET_TEXT in readable_text(shown) and SECRET_NAME in readable_text(shown)

    # Rotation end to end: a client whose primary is k2 still reads the k1 call.
    rotated = await connect(temporal_server.address, codec=EncryptionCodec(ring("k2", "k1", keys=keys)))
    result = await rotated.get_workflow_handle_for(CallWorkflow.run, wf_id).result()
    assert result.transcript[-1]["text"] == SECRET_TEXT


async def test_search_attributes_stay_readable_and_carry_no_personal_data(
    temporal_server: DevStack, temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    wf_id = await run_private_call(temporal_client, task_queue, sqlite_url)
    desc = await temporal_cli(temporal_server, "workflow", "describe", "-w", wf_id)
    attrs = readable_text(desc["workflowExecutionInfo"]["searchAttributes"])
    assert "clinic_reminder" in attrs and "wrong_number" in attrs
    for secret in (SECRET_NAME, SECRET_PHONE, SECRET_TEXT):
        assert secret not in attrs


@pytest.mark.parametrize("path", sorted(HISTORIES.glob("*.json")), ids=lambda p: p.stem)
async def test_saved_unencrypted_histories_replay_through_the_codec(path: Path, keys: dict[str, str]) -> None:
    replayer = Replayer(
        workflows=[CallWorkflow], data_converter=data_converter(EncryptionCodec(ring("k1", keys=keys)))
    )
    result = await replayer.replay_workflow(
        WorkflowHistory.from_json(path.stem, path.read_text()), raise_on_replay_failure=False
    )
    assert result.replay_failure is None, repr(result.replay_failure)


async def test_the_codec_server_answers_hostile_requests_without_a_500_or_a_leak(
    codec_endpoint: str, keys: dict[str, str]
) -> None:
    """A valid ciphertext whose plaintext is no payload is the caller's 400; ``/healthz``
    names the key ids to the token's holder only."""
    cipher = EncryptionCodec(ring("k2", keys=keys))._ciphers["k2"]
    nonce = b"\x01" * 12
    sealed = nonce + cipher.encrypt(nonce, b"\xff\xff\xff not a protobuf", b"k2")
    not_a_payload = Payload(metadata={"encoding": ENCODING, KEY_ID: b"k2"}, data=sealed)
    body = {"payloads": [json.loads(json_format.MessageToJson(not_a_payload))]}
    auth = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient() as http:
        resp = await http.post(f"{codec_endpoint}/decode", json=body, headers=auth)
        assert resp.status_code == 400 and "could not be decoded" in resp.json()["error"]
        assert (await http.get(f"{codec_endpoint}/healthz")).json() == {"ok": True}
        assert (await http.get(f"{codec_endpoint}/healthz", headers=auth)).json()["keys"] == ["k1", "k2"]


async def test_without_a_token_the_codec_server_answers_loopback_hosts_only(keys: dict[str, str]) -> None:
    """A DNS name rebound to 127.0.0.1 reaches the port, but not the codec."""
    port = free_port()
    runner = await start(
        build_app(EncryptionCodec(ring("k1", keys=keys)), token=None, cors_origins=[]), "127.0.0.1", port
    )
    try:
        async with httpx.AsyncClient() as http:
            url = f"http://127.0.0.1:{port}"
            rebound = await http.post(
                f"{url}/decode", json={"payloads": []}, headers={"Host": "evil.example"}
            )
            assert rebound.status_code == 403
            assert (
                await http.get(f"{url}/healthz", headers={"Host": f"attacker.test:{port}"})
            ).status_code == 403
            for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}"):
                ok = await http.post(f"{url}/decode", json={"payloads": []}, headers={"Host": host})
                assert ok.status_code == 200, host
    finally:
        await runner.cleanup()
