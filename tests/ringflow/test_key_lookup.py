"""Where every process finds its payload key, and what a client without one does.

The key `ringflow dev` makes lives in the data directory (``RINGFLOW_DATA_DIR``, per user
by default), so ``ringflow call show`` run from any folder reads a dev stack's calls; a
missing or wrong key is one error line naming where the key was looked for, never a
traceback; and no client (``call list``, ``call simulate --address``, ``campaign
simulate --address``) starts without a key unless ``RINGFLOW_ENCRYPTION=0``. Each command
runs as the user runs it: the ``ringflow`` CLI in a subprocess, from a folder of its own.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ringflow.codec import EncryptionCodec, create_key_file, generate_key
from ringflow.devstack import DevStack
from ringflow.temporal_setup import connect
from tests.support.cli_process import one_error_line, ringflow
from tests.support.paths import ROOT
from tests.support.wfkit import FIXTURES, running_worker, start, wait_until

pytestmark = pytest.mark.asyncio(loop_scope="session")
SCRIPT = ROOT / "examples" / "scripts" / "appointment_reminder_reschedule.yaml"


def env_without_keys(server: DevStack, data_dir: Path) -> dict[str, str]:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "RINGFLOW_TEMPORAL_ADDRESS": server.address,
        "RINGFLOW_DATA_DIR": str(data_dir),
    }
    env.pop("RINGFLOW_CODEC_KEYS", None)
    env.pop("RINGFLOW_CODEC_KEY_FILE", None)
    return env


async def test_call_show_from_another_folder_finds_the_data_directorys_key(
    temporal_server: DevStack, task_queue: str, sqlite_url: str, tmp_path: Path
) -> None:
    """No setting names the data directory: the default one (per user) holds the key."""
    home = tmp_path / "home"
    data = home / ".local" / "share" / "ringflow"
    ring = create_key_file(data / "codec.keys")  # as `ringflow dev` makes it, from any folder
    client = await connect(temporal_server.address, temporal_server.namespace, codec=EncryptionCodec(ring))
    elsewhere = tmp_path / "some" / "other" / "folder"
    elsewhere.mkdir(parents=True)
    env = {**env_without_keys(temporal_server, data), "RINGFLOW_DATABASE_URL": sqlite_url, "HOME": str(home)}
    for name in ("RINGFLOW_DATA_DIR", "XDG_DATA_HOME"):
        env.pop(name, None)
    async with running_worker(client, task_queue, sqlite_url):
        call = await start(client, task_queue)
        await call.hangup("user_hangup")
        await wait_until(lambda: call.handle.result(), what="the call's record")
    code, out, err = await ringflow(env, "call", "show", call.call_id, cwd=elsewhere)
    assert code == 0, err
    assert call.call_id in out and "user_hangup" in out

    # another key (not the one the call was written with): one line, which key, no traceback
    env["RINGFLOW_CODEC_KEYS"] = f"other:{generate_key()}"
    code, _, err = await ringflow(env, "call", "show", call.call_id, cwd=elsewhere)
    assert code == 1
    assert "not in the key ring" in one_error_line(err)


async def test_a_client_without_a_key_refuses_to_start(temporal_server: DevStack, tmp_path: Path) -> None:
    empty = tmp_path / "no-key-here"
    env = env_without_keys(temporal_server, empty)
    where = str((empty / "codec.keys").absolute())
    contacts = tmp_path / "contacts.csv"
    contacts.write_text("phone,patient\n+12125550199,Sam\n")
    for args in (
        ["call", "list"],
        ["call", "show", "some-call"],
        ["campaign", "list"],
        ["call", "simulate", "--address", temporal_server.address, str(SCRIPT)],
        [
            "campaign", "simulate", str(contacts),
            "--flow", str(FIXTURES / "clinic.yaml"), "--address", temporal_server.address,
        ],
    ):  # fmt: skip
        code, _, err = await ringflow(env, *args, cwd=tmp_path)
        assert code != 0, args
        line = one_error_line(err)
        assert where in line and "RINGFLOW_ENCRYPTION=0" in line, (args, line)

    env["RINGFLOW_ENCRYPTION"] = "0"  # said explicitly: the client runs in clear
    code, _, err = await ringflow(env, "call", "list", cwd=tmp_path)
    assert code == 0, err
