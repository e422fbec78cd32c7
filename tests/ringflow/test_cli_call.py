"""``ringflow call ...`` and ``ringflow temporal setup`` as real processes: no crash at exit,
variables checked before connecting, and an unreachable server explained."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import uuid
import weakref
from typing import Any

import pytest
from temporalio.client import Client
from typer.testing import CliRunner

from ringflow.cli import app
from ringflow.devstack import DevStack
from tests.support.cli_process import ringflow
from tests.support.paths import ROOT
from tests.support.wfkit import FIXTURES, Agent, running_worker, start, wait_state, wait_until

CLINIC = FIXTURES / "clinic.yaml"
ROUNDS = 3  # before the fix, one run of `call list` in two aborted, other commands less often


@pytest.mark.timeout(300)  # some 20 interpreter starts; slow on a loaded machine
async def test_no_command_aborts_at_exit(
    temporal_server: DevStack, temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    """Every command that connects to Temporal, run repeatedly as the user runs it: each
    exits with its own code, never 134 with ``Fatal Python error: PyGILState_Release``."""
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "RINGFLOW_TEMPORAL_ADDRESS": temporal_server.address,
        "RINGFLOW_TASK_QUEUE": task_queue,
    }
    seen: list[tuple[str, int, str]] = []

    async def run(*args: str) -> str:
        code, out, err = await ringflow(env, *args)
        seen.append((" ".join(args[:2]), code, err[-300:]))
        return out

    async with running_worker(temporal_client, task_queue, sqlite_url):
        for _ in range(ROUNDS):
            started = await run("call", "start", str(CLINIC), "--var", "patient=Sam Roe")
            call_id = started.strip().splitlines()[-1]
            shown, *_ = await asyncio.gather(
                run("call", "show", call_id),
                run("call", "list", "--limit", "5"),
                run("call", "list", "--status", "live"),
                run("temporal", "setup"),
                run("call", "show", "no-such-call"),
            )  # an error path, exit 1
            assert "status       dialing" in shown  # no agent ever attached (README: `dialing`)
            await run("call", "hangup", call_id)
    crashed = [s for s in seen if s[1] not in (0, 1) or "Fatal Python error" in s[2]]
    assert not crashed, crashed
    assert sorted(code for _, code, _ in seen) == [0] * (6 * ROUNDS) + [1] * ROUNDS


@pytest.mark.parametrize(
    "args",
    [
        ["call", "list"],
        ["call", "show", "no-such-call"],
        ["call", "hangup", "no-such-call"],
        ["temporal", "setup"],
        ["call", "start", str(CLINIC), "--var", "patient=Sam"],
    ],
)
def test_clients_are_freed_before_the_command_returns(
    temporal_server: DevStack,
    monkeypatch,  # type: ignore[no-untyped-def]
    args: list[str],
) -> None:
    """The cause of the abort, checked without luck: a client still alive when the command
    returns is dropped during interpreter teardown. The collector is off, as it may well
    be between a command's end and the interpreter's."""
    monkeypatch.setenv("RINGFLOW_TEMPORAL_ADDRESS", temporal_server.address)
    monkeypatch.setenv("RINGFLOW_TASK_QUEUE", f"nobody-{uuid.uuid4().hex[:8]}")

    # Only the clients this command makes are followed (weakly): a scan of every object
    # alive would also meet what earlier tests in the process left for the collector
    # (workflow sandboxes, their workers' clients), freed or not at any moment.
    made: list[weakref.ref[Client]] = []
    init = Client.__init__

    def tracked(self: Client, *a: Any, **kw: Any) -> None:
        made.append(weakref.ref(self))
        init(self, *a, **kw)

    monkeypatch.setattr(Client, "__init__", tracked)
    gc.collect()
    gc.disable()
    try:
        res = CliRunner().invoke(app, args)
        alive = sum(ref() is not None for ref in made)
    finally:
        gc.enable()
    assert res.exit_code in (0, 1), res.output
    assert made, "the command made no client: nothing was checked"
    assert alive == 0, f"{alive} of the {len(made)} clients the command made outlived it"


def test_start_checks_variables_before_connecting(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("RINGFLOW_TEMPORAL_ADDRESS", "127.0.0.1:9")  # nothing listens there
    runner = CliRunner()
    typo = runner.invoke(
        app, ["call", "start", str(CLINIC), "--var", "patient=Sam", "--var", "patiant_nme=x"]
    )
    assert typo.exit_code == 1
    assert "no variable 'patiant_nme' (did you mean 'patient'?)" in typo.output
    assert "cannot reach" not in typo.output
    missing = runner.invoke(app, ["call", "start", str(CLINIC), "--var", "clinic_name=X"])
    assert missing.exit_code == 1 and "required variable 'patient'" in missing.output
    assert "cannot reach" not in missing.output
    wrong_type = runner.invoke(app, ["call", "start", str(CLINIC), "--var", "patient=12"])
    assert wrong_type.exit_code == 1 and "variables.patient: expected string" in wrong_type.output
    dial = runner.invoke(
        app,
        ["call", "dial", str(CLINIC), "--to", "+15550100", "--trunk", "ST_test", "--var", "patiant_nme=x"],
    )
    assert dial.exit_code == 1, dial.output
    assert "no variable 'patiant_nme' (did you mean 'patient'?)" in dial.output
    assert "cannot reach" not in dial.output


def test_unreachable_temporal_says_how_to_start_it(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("RINGFLOW_TEMPORAL_ADDRESS", "127.0.0.1:9")
    runner = CliRunner()
    for args in (
        ["call", "list"],
        ["call", "show", "x"],
        ["call", "hangup", "x"],
        ["call", "start", str(CLINIC), "--var", "patient=Sam"],
        ["temporal", "setup"],
    ):
        res = runner.invoke(app, args)
        assert res.exit_code == 1, (args, res.output)
        assert "cannot reach Temporal at 127.0.0.1:9" in res.output, (args, res.output)
        assert "`make run` or `ringflow dev`" in res.output, (args, res.output)
        assert "Traceback" not in res.output


async def test_show_reads_an_ended_call_without_a_worker(
    temporal_server: DevStack, temporal_client: Client, task_queue: str, sqlite_url: str, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    """An ended call is read from its record (its worker may be gone, as a simulation's is);
    a call long enough to continue-as-new left its transcript in the database. Each reply
    is ~10 KB, so the transcript (~600 KB) is over the record's 512 KB inline budget whatever
    the continue-as-new timing (a call whose only continue-as-new came before its 50th turn
    kept a small transcript inline, and the test flaked on that)."""
    turns = 60
    pad = " " + "x" * 10_000
    monkeypatch.setenv("RINGFLOW_TEMPORAL_ADDRESS", temporal_server.address)
    monkeypatch.setenv("RINGFLOW_DATABASE_URL", sqlite_url)
    async with running_worker(temporal_client, task_queue, sqlite_url):
        call = await start(temporal_client, task_queue, max_history_events=50)
        agent = Agent(call)
        for i in range(turns):
            await agent.say(("user", f"turn {i}"), ("assistant", f"reply {i}{pad}"))
        await wait_state(call, lambda s: s.turns == 2 * turns and s.runs >= 2, timeout=60)
        await call.hangup()
        record = await wait_until(lambda: call.handle.result(), timeout=60, what="result")
    assert record.transcript == []  # the record points at the database
    shown = await asyncio.to_thread(CliRunner().invoke, app, ["call", "show", "--json", call.call_id])
    assert shown.exit_code == 0, shown.output
    got = json.loads(shown.output)
    assert got["status"] == "ended" and got["end_reason"] == "user_hangup"
    want = [x for i in range(turns) for x in (f"turn {i}", f"reply {i}{pad}")]
    assert [t["text"] for t in got["transcript"]] == want
