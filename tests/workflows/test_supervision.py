"""Supervisors in ``CallWorkflow`` on a real dev server: the ``supervise`` update records a
takeover at once (``status`` and ``RingflowStatus`` are ``takeover``), refuses what the
call cannot take now with why, and the agent's ``supervisor`` events apply each action to
the workflow's engine as the workflow recorded it (a forged one is refused); the hand-back
moves the call to the node picked. Raw events stand in for the agent
(``tests/support/wfkit.Agent``); the real agent is in ``tests/ringflow/test_supervisor_scripts.py``."""

from __future__ import annotations

import time

import pytest
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.service import RPCError, RPCStatusCode

from ringflow.callflow.state import CallState
from ringflow.contract.events import CallEvent
from ringflow.contract.supervision import Supervision, SupervisorRequest
from ringflow.workflows.client import CallHandle
from ringflow.workflows.supervision import paused_deadline
from tests.support.wfkit import Agent, running_worker, start, wait_state, wait_until


async def refused(call: CallHandle, **req: object) -> str:
    with pytest.raises(WorkflowUpdateFailedError) as exc:
        await call.supervise(SupervisorRequest.model_validate(req))
    return str(getattr(exc.value.cause, "message", exc.value.cause))


async def applied(call: CallHandle, agent: Agent, sid: int, action: str) -> None:
    """What the real agent sends once it applied supervisor action ``sid`` (agents/controller.py)."""
    eid, seq = agent.next()
    data = {"id": sid, "action": action}
    ev = CallEvent(event_id=eid, seq=seq, kind="supervisor", data=data, at=time.time(), epoch=agent.epoch)
    await call.event(ev)


async def engine_state(call: CallHandle) -> CallState:
    state: CallState = await call.handle.query("call_state", result_type=CallState)
    return state


async def test_takeover_and_handback_are_recorded_shown_refused_when_out_of_place_and_applied_in_order(
    temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    async with running_worker(temporal_client, task_queue, sqlite_url):
        call = await start(temporal_client, task_queue)
        assert "not live yet" in await refused(call, action="takeover")  # no agent has the call
        snap = await call.attach("agent-1")
        agent = Agent(call, epoch=snap.epoch, seq=snap.next_seq - 1)
        await wait_state(call, lambda s: s.status == "live", what="live")
        assert "there is nothing to hand back" in await refused(call, action="handback")
        assert "needs the hint" in await refused(call, action="whisper", text="   ")
        whisper = await call.supervise(SupervisorRequest(action="whisper", text="Offer Tuesday.", by="ann"))
        assert (whisper.step.id, whisper.step.text, whisper.supervision.takeover) == (
            1,
            "Offer Tuesday.",
            False,
        )

        took = await call.supervise(SupervisorRequest(action="takeover", by="ann"))
        assert took.step.id == 2 and took.supervision.takeover and took.supervision.since is not None
        assert (await call.state()).status == "takeover"
        query = f"WorkflowId = '{call.handle.id}' AND RingflowStatus = 'takeover'"
        await wait_until(lambda: temporal_client.count_workflows(query), what="RingflowStatus takeover")
        assert "taken over already (by ann)" in await refused(call, action="takeover")
        assert "hand it back before whispering" in await refused(call, action="whisper", text="Hi")
        why = await refused(call, action="handback", node="nowhere")
        assert "no node 'nowhere'" in why and "offer" in why and "verify" in why
        assert "'node' is where a hand-back resumes" in await refused(call, action="takeover", node="offer")

        assert not (await engine_state(call)).takeover  # recorded; the agent has not applied it yet
        await applied(call, agent, 1, "whisper")
        await applied(call, agent, 2, "takeover")
        state = await wait_until(
            lambda: _when(engine_state(call), lambda s: s.takeover), what="the takeover applied"
        )
        assert state.supervisor_seen == 2 and state.node == "verify"
        await applied(call, agent, 99, "handback")  # the agent may not invent an action
        view = await wait_state(
            call, lambda s: any("action 99" in r.reason for r in s.rejected), what="refused"
        )
        assert view.status == "takeover"

        back = await call.supervise(SupervisorRequest(action="handback", node="offer", by="ann"))
        assert not back.supervision.takeover and back.supervision.paused_s >= 0
        assert (await call.state()).status == "live"
        await applied(call, agent, 3, "handback")
        state = await wait_until(
            lambda: _when(engine_state(call), lambda s: s.node == "offer"), what="handed back"
        )
        assert (state.path, state.takeover, state.transitions) == (["verify", "offer"], False, 1)
        sup: Supervision = await call.supervision()
        assert [a.action for a in sup.actions] == ["whisper", "takeover", "handback"]
        transcript = [t.text for t in await call.transcript() if t.role == "system"]
        assert transcript[-3:] == [
            "supervisor whisper by ann",
            "supervisor takeover by ann",
            "supervisor hand-back by ann at offer",
        ]
        await call.hangup()
        await wait_state(call, lambda s: s.status == "ended", what="ended")
        assert "has ended" in await refused_late(call, action="whisper", text="Too late")


async def refused_late(call: CallHandle, **req: object) -> str:
    """An action sent once the call has ended. Its workflow closes moments later: while it is
    open the validator refuses the action ("the call has ended"); once it has closed, or when it
    closes with the action in flight ("aborted by closing workflow"), the server refuses it. The
    CLI prints either as a refusal (``ringflow/cli/supervise.py``)."""
    try:
        return await refused(call, **req)
    except RPCError as exc:  # not a WorkflowUpdateFailedError: the server's refusal
        assert exc.status == RPCStatusCode.NOT_FOUND, exc
        assert "closing workflow" in exc.message or "completed" in exc.message, exc.message
        await call.handle.result()  # it has closed, as the server said
        return "the call has ended (closed)"


async def _when(got: object, pred: object) -> CallState | None:
    state: CallState = await got  # type: ignore[misc]
    return state if pred(state) else None  # type: ignore[operator]


def test_the_time_limit_pauses_during_a_takeover_and_moves_later_by_it_after() -> None:
    limit = 1000.0
    assert paused_deadline(Supervision(), limit, 900.0) == limit
    during = Supervision(takeover=True, since=950.0, paused_s=20.0)
    assert paused_deadline(during, limit, 990.0) == limit + 20 + 40  # never due while it lasts
    assert paused_deadline(during, limit, 2000.0) > 2000.0
    assert paused_deadline(Supervision(paused_s=60.0), limit, 1050.0) == limit + 60
