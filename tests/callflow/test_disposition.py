"""One disposition rule (``callflow.dispositions``) for the engine, the record and the state query.

An extracted ``disposition`` wins, then the end node's ``disposition``, then the end
reason. The engine decides it; the workflow's record and its ``state`` query only read
it, so a call can never report two outcomes (the record once had a rule of its own, on
an extracted ``call_disposition``).
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from ringflow.callflow.engine import Engine
from ringflow.callflow.events import ExtractionResult, HangUp
from ringflow.callflow.state import CallState
from ringflow.contract.call import CallInput
from ringflow.workflows.call_progress import CallProgress
from ringflow.workflows.inbox import Inbox
from ringflow.workflows.record import build_record, call_view
from tests.support.engine_flows import Call, agent, build, end, flow, go

SPEC = [{"name": "disposition", "enum": ["callback", "lost"]}, {"name": "call_disposition"}]


def outcomes(state: CallState) -> tuple[str | None, str | None, str | None]:
    """The disposition as the engine, the persisted record and the state query give it."""
    inp = CallInput(call_id="c1", definition=DEFINITION)
    record = build_record(inp, state, "ended", [], 0, 0.0, datetime.now(UTC))
    query = call_view(inp, CallProgress(flow_state=state, status="ended", started_at=0.0), Inbox(), 0)
    return state.disposition, record.disposition, query.disposition


DEFINITION = build(
    flow({"talk": agent(go("done", "bye"), extract=SPEC), "bye": end(disposition="finished", extract=SPEC)})
)


def ended_call(**extracted: object) -> CallState:
    call = Call(Engine(DEFINITION))
    call.call("done")
    call(ExtractionResult(node="bye", values=dict(extracted)))
    assert call.state.ended
    return call.state


def test_an_extracted_disposition_wins_everywhere() -> None:
    assert outcomes(ended_call(disposition="callback")) == ("callback", "callback", "callback")


@pytest.mark.parametrize(
    "extracted", [{"call_disposition": "lost"}, {}, {"disposition": ""}, {"disposition": "not_declared"}]
)
def test_otherwise_the_end_nodes_disposition_everywhere(extracted: dict[str, object]) -> None:
    """``call_disposition`` is an ordinary extracted value, and an empty or undeclared value
    (outside the spec's enum) decides nothing."""
    assert outcomes(ended_call(**extracted)) == ("finished", "finished", "finished")


def test_a_call_ended_elsewhere_is_its_end_reason() -> None:
    call = Call(Engine(DEFINITION))
    call(HangUp(reason="user_hangup"))
    assert outcomes(call.state) == ("user_hangup", "user_hangup", "user_hangup")
