"""Helpers for workflow tests: a worker in this process, waiting on conditions, events."""

from __future__ import annotations

import asyncio
import os
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from ringflow.activities.dispatch import Dispatcher
from ringflow.activities.recording import Recorder
from ringflow.activities.telephony import Telephony
from ringflow.callflow.engine import Engine
from ringflow.callflow.loader import load_flow
from ringflow.callflow.model import FlowDefinition
from ringflow.contract.call import CallView
from ringflow.contract.events import CallEvent, TransitionEvent, Turn, TurnsEvent
from ringflow.contract.updates import CallFunctionRequest, Snapshot, ValuesAnswer
from ringflow.settings import Settings
from ringflow.workflows.client import CallHandle, start_call
from ringflow.workflows.worker import build_worker
from tests.support.paths import ROOT, TESTS

FIXTURES = TESTS / "fixtures" / "wf"


def clinic() -> FlowDefinition:
    return load_flow(FIXTURES / "clinic.yaml")


def req(node: str, name: str, **args: object) -> CallFunctionRequest:
    """A ``call_function`` request with a fresh event id, as the agent sends for each tool call."""
    return CallFunctionRequest(event_id=f"fn-{uuid.uuid4().hex[:8]}", node=node, name=name, args=args)


def settings_for(database_url: str, **extra: Any) -> Settings:
    return Settings(database_url=database_url, http_allow_private=True, **extra)


@dataclass
class Services:
    """The dispatcher and telephony of the workers ``running_worker`` builds: a test's
    LiveKit fake sets them (``use_services``), a worker without them has none."""

    dispatcher: Dispatcher | None = None
    telephony: Telephony | None = None
    recorder: Recorder | None = None


SERVICES = Services()


def use_services(
    monkeypatch: pytest.MonkeyPatch,
    *,
    dispatcher: Dispatcher | None = None,
    telephony: Telephony | None = None,
    recorder: Recorder | None = None,
) -> None:
    """For this test only (``monkeypatch`` undoes it)."""
    if dispatcher is not None:
        monkeypatch.setattr(SERVICES, "dispatcher", dispatcher)
    if telephony is not None:
        monkeypatch.setattr(SERVICES, "telephony", telephony)
    if recorder is not None:
        monkeypatch.setattr(SERVICES, "recorder", recorder)


@asynccontextmanager
async def running_worker(
    client: Client, task_queue: str, database_url: str, **settings: Any
) -> AsyncIterator[None]:
    worker = build_worker(
        client,
        settings_for(database_url, **settings),
        task_queue=task_queue,
        dispatcher=SERVICES.dispatcher,
        telephony=SERVICES.telephony,
        recorder=SERVICES.recorder,
    )
    async with worker:
        yield


async def worker_child(module: str, *args: str) -> asyncio.subprocess.Process:
    """A worker in a separate process (``python -m tests.support.<module> ARGS``), once it printed
    ``READY``: the tests that SIGKILL a worker kill this one."""
    root = ROOT
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        f"tests.support.{module}",
        *args,
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root), "PYTHONUNBUFFERED": "1"},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    assert proc.stdout is not None
    try:
        assert (await asyncio.wait_for(proc.stdout.readline(), 60)).strip() == b"READY"
    except BaseException:
        proc.kill()
        await proc.wait()
        raise
    return proc


async def flows_worker_child(
    address: str, task_queue: str, database_url: str, flows_dir: Path
) -> asyncio.subprocess.Process:
    """The real worker in a separate process, trusting the handlers in ``flows_dir``
    (``tests/support/jobs_worker_child.py``): the one a test SIGKILLs mid-handler or mid-job."""
    return await worker_child(
        "jobs_worker_child",
        *("--address", address, "--task-queue", task_queue),
        *("--database-url", database_url, "--flows-dir", str(flows_dir)),
    )


WAIT_S = 60.0  # a bound for a hung test, not a speed requirement: waits end on their condition


async def wait_until(check: Callable[[], Awaitable[Any]], timeout: float = WAIT_S, what: str = "") -> Any:
    """Poll ``check`` until it returns something truthy; fail with the last value seen.
    A check that itself blocks (a workflow's result) is bounded by the same deadline."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while (left := deadline - time.monotonic()) > 0:
        try:
            last = await asyncio.wait_for(check(), left)
        except TimeoutError:
            break
        if last:
            return last
        await asyncio.sleep(0.05)  # the poll's period
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what or check}: last value {last!r}")


async def wait_state(
    call: CallHandle, pred: Callable[[CallView], bool], timeout: float = WAIT_S, what: str = ""
) -> CallView:
    async def check() -> CallView | None:
        st = await call.state()
        return st if pred(st) else None

    return await wait_until(check, timeout, what)


class Agent:
    """Drives a call as the agent would: sequenced events with unique ids (and, given
    one, the agent's epoch on each, as an attached agent sends them)."""

    def __init__(self, call: CallHandle, epoch: int | None = None, seq: int = 0) -> None:
        self.call = call
        self.seq = seq
        self.epoch = epoch

    def next(self) -> tuple[str, int]:
        self.seq += 1
        return f"ev-{uuid.uuid4().hex[:10]}", self.seq

    def transition_event(
        self, from_node: str, name: str, args: dict[str, Any] | None = None
    ) -> TransitionEvent:
        eid, seq = self.next()
        return TransitionEvent(
            event_id=eid,
            seq=seq,
            from_node=from_node,
            name=name,
            args=args or {},
            at=time.time(),
            epoch=self.epoch,
        )

    async def transition(self, from_node: str, name: str, args: dict[str, Any] | None = None) -> None:
        await self.call.transition(self.transition_event(from_node, name, args))

    def turns_event(self, *pairs: tuple[str, str]) -> TurnsEvent:
        eid, seq = self.next()
        return TurnsEvent(
            event_id=eid,
            seq=seq,
            at=time.time(),
            items=[Turn(role=r, text=t) for r, t in pairs],
            epoch=self.epoch,
        )

    async def say(self, *pairs: tuple[str, str]) -> None:
        await self.call.turns(self.turns_event(*pairs))

    async def collect(self, extraction_id: str) -> ValuesAnswer:
        """What the real agent does for each running extraction (``agents/values.py``): ask
        the workflow for its result and report, in order, that it was applied here."""
        answer = await self.call.values(extraction_id, after_seq=self.seq, epoch=self.epoch)
        if not answer.gone:
            eid, seq = self.next()
            data = {"id": answer.id, "values": answer.values, "error": answer.error}
            await self.call.event(
                CallEvent(
                    event_id=eid, seq=seq, kind="extracted", data=data, at=time.time(), epoch=self.epoch
                )
            )
        return answer


async def start(
    client: Client, task_queue: str, definition: FlowDefinition | None = None, **kw: Any
) -> CallHandle:
    kw.setdefault("variables", {"patient": "Alex Doe"})
    return await start_call(client, definition or clinic(), task_queue=task_queue, **kw)


def offered(snap: Snapshot) -> tuple[str | None, list[str]]:
    """The prompt and tool names an agent attaching with ``snap`` offers the LLM (its own
    engine derives them, as the agent does; the snapshot does not carry them)."""
    node = Engine(snap.definition).snapshot(snap.state)
    return (node.prompt, [t.name for t in node.tools]) if node else (None, [])
