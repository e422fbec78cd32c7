"""The call's state, as ``CallWorkflow`` keeps it: one model, :class:`CallProgress`, and
three parts with rules of their own.

* :class:`Transcript`: the turns this run holds, where they start in the whole call (the
  earlier ones are in the database after continue-as-new) and what they weigh.
* :class:`FunctionCalls`: the LLM's function calls, each run once whatever the retries and
  runs: the answers remembered by event id, the ones running, the cancellable ones.
* :class:`Liveness`: when the agent was last seen, and when it is overdue.

Pure and deterministic (times come from the workflow's clock). What carries over to the
next run goes through ``Continuation`` (``ringflow/contract/call.py``): the progress as it is, the
parts as they continue. Its JSON is the one earlier releases wrote, so a run started
by either release continues on the other.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

from ringflow.callflow.events import ExtractionResult
from ringflow.callflow.state import CallState
from ringflow.contract.call import Continuation
from ringflow.contract.events import RejectedEvent, Turn
from ringflow.contract.recording import RecordingInfo
from ringflow.contract.records import AmdVerdict, SipOutcome
from ringflow.contract.supervision import Supervision
from ringflow.contract.updates import CallFunctionResult
from ringflow.workflows import budgets

FN_REMEMBERED = 200  # answers this run keeps by event id (older ones: see prev.kept_results)
CANCELS_REMEMBERED = 200


class CallProgress(BaseModel):
    """Where the call is and what happened to it: everything of the workflow's state that
    is not one of the parts below, carried whole across continue-as-new."""

    flow_state: CallState  # where the engine has the call in its flow
    status: str = "dialing"  # dialing, live, ended (RingflowStatus)
    rejected: list[RejectedEvent] = []  # what was refused, and notes (the newest REJECTED_TAIL)
    agent_id: str | None = None  # the agent on the call, as it last said
    dispatch_failures: int = 0  # dispatches in a row that brought no agent
    extraction_errors: dict[str, str] = {}  # by node, the last extraction's failure
    # extraction results not yet applied: the agent applies each in its event order and
    # says so with an ``extracted`` event (call_driver.py), or the call's end does
    values_ready: list[ExtractionResult] = []
    events_applied: int = 0
    started_at: float
    runs: int = 1  # this run's number (continue-as-new starts the next)
    hangup_seen: bool = False  # the agent said the call is over
    sip: SipOutcome | None = None  # the dial's answer (workflows/dialing.py)
    amd: AmdVerdict | None = None  # who picked up, by the agent's answering-machine detection
    epoch: int = 0  # the current agent's attach number (workflows/epochs.py); 0 before any
    recording: RecordingInfo | None = None  # asked for once (workflows/recording.py)
    supervision: Supervision = Supervision()  # supervisors' actions (workflows/supervision.py)

    @property
    def shown_status(self) -> str:
        """The status ops see (``RingflowStatus``): ``takeover`` while a supervisor has a
        live call; the loop's own ``status`` stays ``live`` (its agent is still watched)."""
        return "takeover" if self.status == "live" and self.supervision.takeover else self.status

    @classmethod
    def continued(cls, prev: Continuation, now: float) -> CallProgress:
        return cls(
            flow_state=prev.state,
            status=prev.status,
            rejected=list(prev.rejected),
            agent_id=prev.agent_id,
            dispatch_failures=prev.dispatch_failures,
            extraction_errors=dict(prev.extraction_errors),
            values_ready=list(prev.values_ready),
            events_applied=prev.events_applied,
            started_at=prev.started_at or now,
            runs=prev.runs + 1,
            hangup_seen=prev.hangup_seen,
            sip=prev.sip,
            amd=prev.amd,
            epoch=prev.epoch,
            recording=prev.recording,
            supervision=prev.supervision or Supervision(),
        )

    @property
    def handler_state(self) -> dict[str, Any]:
        """What the flow's handlers keep (``flow_manager.state``)."""
        return self.flow_state.state


class Transcript:
    def __init__(self, tail: Sequence[Turn] = (), count: int | None = None) -> None:
        self.turns: list[Turn] = list(tail)
        # index of ``turns[0]`` in the whole call: the turns before it are in the database
        self.base = (len(self.turns) if count is None else count) - len(self.turns)
        self.bytes = sum(budgets.turn_bytes(t) for t in self.turns)

    @classmethod
    def continued(cls, prev: Continuation) -> Transcript:
        return cls(prev.transcript_tail, prev.transcript_count)

    def add(self, turn: Turn, weigh: bool = True) -> None:
        """``weigh`` false: a line note (keys, a machine answering) that was never counted
        towards continue-as-new; kept so that replays decide it as they were recorded."""
        self.turns.append(turn)
        if weigh:
            self.bytes += budgets.turn_bytes(turn)

    @property
    def count(self) -> int:
        """Turns in the whole call, earlier runs included."""
        return self.base + len(self.turns)

    def tail(self) -> list[Turn]:
        """The newest turns, within the budget an attaching agent and the next run get."""
        return self.turns[budgets.tail_start(self.turns) :]

    def window(self, start: int) -> dict[str, Any]:
        """Turns from absolute index ``start`` (or the oldest held), as many as fit a query
        answer: a reader pages through them, and reads indexes under ``base`` from the
        database."""
        first = max(start, self.base)
        turns: list[dict[str, Any]] = []
        size = 0
        for t in self.turns[first - self.base :]:
            size += budgets.turn_bytes(t)
            if turns and size > budgets.SLICE_MAX_BYTES:
                break
            turns.append(t.model_dump(mode="json"))
        return {"base": self.base, "start": first, "turns": turns, "total": self.count}


class FunctionCalls:
    def __init__(
        self, results: dict[str, CallFunctionResult] | None = None, done: Sequence[str] = ()
    ) -> None:
        self.results: dict[str, CallFunctionResult] = dict(results or {})
        self.done: set[str] = set(done)  # ran in an earlier run; result too large to keep
        self.running: set[str] = set()
        self.handles: dict[str, asyncio.Task[Any]] = {}  # cancellable runs, by event id
        self.cancel_requested: set[str] = set()  # cancels that came before their call

    @classmethod
    def continued(cls, prev: Continuation) -> FunctionCalls:
        return cls(prev.fn_results, prev.fn_done)

    def known(self, event_id: str) -> bool:
        """Answered, running, or answered in an earlier run: never run again."""
        return event_id in self.results or event_id in self.running or event_id in self.done

    def remember(self, event_id: str, out: CallFunctionResult) -> None:
        self.results[event_id] = out
        if len(self.results) > FN_REMEMBERED:
            self.results.pop(next(iter(self.results)))

    def ask_cancel(self, event_id: str) -> None:
        if event_id not in self.results and len(self.cancel_requested) < CANCELS_REMEMBERED:
            self.cancel_requested.add(event_id)

    def for_next_run(self) -> tuple[dict[str, CallFunctionResult], list[str]]:
        """What the next run remembers: the results it may be asked again, within the budget."""
        return budgets.kept_results(self.results, sorted(self.done))


class Liveness:
    """The agent is overdue once nothing came from it for ``timeout_s`` (while live)."""

    def __init__(self, timeout_s: float, now: float) -> None:
        self.timeout_s = timeout_s
        self.last_seen = now

    def seen(self, now: float) -> None:
        self.last_seen = now

    def overdue_now(self, now: float) -> None:
        """Make the agent overdue at once (LiveKit said it left): the main loop replaces it."""
        self.last_seen = now - self.timeout_s

    @property
    def due(self) -> float:
        return self.last_seen + self.timeout_s

    def overdue(self, now: float) -> bool:
        return now - self.last_seen >= self.timeout_s
