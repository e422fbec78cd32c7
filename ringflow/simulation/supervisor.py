"""A script's ``supervisor:`` turns, played through the real parts: the ``supervise`` update
on the call's workflow (what ``ringflow call whisper|takeover|handback`` sends), the agent's
supervision feed (``agents/supervised.py``) read at once instead of on its next poll, and
the supervisor's lines as the turns of the takeover (role ``supervisor``).

After each action the agent's engine and the workflow's are compared, once the workflow has
applied every event the agent sent: a difference is a failure of the script.
"""

from __future__ import annotations

from typing import Any

from ringflow.agents.runner import AgentRun
from ringflow.callflow.state import CallState
from ringflow.contract.supervision import SupervisorKind, SupervisorRequest

SIM_SUPERVISOR = "sim-supervisor"
SETTLE_TIMEOUT_S = 30.0


async def play_supervisor(run: AgentRun, turn: Any, key: str, sent: set[str]) -> str | None:
    """Play one ``supervisor:`` turn (``key`` names it); ``sent``: the keys whose action the
    workflow took already (a turn replayed after a kill is not asked twice). A takeover
    pauses the bot and the supervisor speaks; a hand-back has the supervisor speak, then
    the bot resumes; while the bot has the call, the line is a whisper. Returns why the two
    engines differ after it, or None."""
    ctrl = run.controller
    ctrl.begin_turn(key)
    if turn.takeover:
        await _act(run, "takeover", key, sent)
        await ctrl.on_segment_turn("supervisor", turn.supervisor)
    elif turn.handback is not None:
        await ctrl.on_segment_turn("supervisor", turn.supervisor)
        node = turn.handback if isinstance(turn.handback, str) else None
        await _act(run, "handback", key, sent, node=node)
        await run.session.wait_for_idle()  # the bot's first turn after the hand-back
    elif ctrl.state.takeover:
        await ctrl.on_segment_turn("supervisor", turn.supervisor)
    else:
        await _act(run, "whisper", key, sent, text=turn.supervisor)
    return await agreement(run)


async def _act(run: AgentRun, action: SupervisorKind, key: str, sent: set[str], **fields: Any) -> None:
    if key not in sent:
        req = SupervisorRequest(action=action, by=SIM_SUPERVISOR, **fields)
        await run.call.supervise(req)
        sent.add(key)
    assert run.supervisors is not None
    await run.supervisors.poll()  # what the agent's next poll would do, now


async def agreement(run: AgentRun, tries: int = 20) -> str | None:
    """The agent's state against the workflow's once the workflow has applied the agent's
    events up to the one that state follows. The agent goes on meanwhile (an extraction's
    result applied in the background): a state it left before the workflow answered is
    compared again, from where the agent is then."""
    ctrl = run.controller
    differ: list[str] = []
    for _ in range(tries):
        if ctrl.dead:
            return None
        mine, seq = ctrl.state, ctrl.seq  # one moment: the state after event ``seq``
        await run.outbox.flush(timeout=SETTLE_TIMEOUT_S)
        theirs = await run.call.settle(ctrl.agent_id, after_seq=seq, epoch=ctrl.epoch)
        if _same(mine, theirs):
            return None
        differ = sorted(
            k for k in CallState.model_fields if k != "now" and getattr(mine, k) != getattr(theirs, k)
        )
        if ctrl.seq == seq and _same(ctrl.state, mine):  # the agent stood still: a real difference
            break
    return f"after supervisor turn {ctrl.turn_key}: the agent's and the workflow's state differ in {differ}"


def _same(a: CallState, b: CallState) -> bool:
    return a.model_dump(exclude={"now"}) == b.model_dump(exclude={"now"})
