"""A function's answer as its outcome alone (``workflows/function_answers.py``): asked from
the workflow's own state (the request's ``state_digest``), the real ``CallWorkflow`` answers
with the run's outcome, and the step the agent's engine takes from it
(``callflow/function_step.py``) is the whole answer's effects and state, the one the
workflow holds. Asked from anywhere else, or without a digest, the answer is whole."""

from __future__ import annotations

from temporalio.client import Client

from ringflow.callflow.engine import Engine
from ringflow.callflow.events import FunctionCalled
from ringflow.callflow.function_step import function_step, state_digest
from ringflow.contract.updates import CallFunctionRequest
from tests.support.wfkit import Agent, clinic, req, running_worker, start, wait_state


def called(r: CallFunctionRequest) -> FunctionCalled:
    return FunctionCalled(name=r.name, args=r.args, node=r.node, at=r.at)


async def test_asked_from_the_workflow_s_state_the_outcome_alone_makes_the_whole_answer(
    temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    engine = Engine(clinic())
    async with running_worker(temporal_client, task_queue, sqlite_url):
        call = await start(temporal_client, task_queue)
        snap = await call.attach("agent-1")
        assert snap.derives  # this worker takes the digest
        agent = Agent(call, epoch=snap.epoch)
        await agent.transition("verify", "confirmed")
        await wait_state(call, lambda s: s.node == "offer", what="node offer")
        before = await call.handle.query("call_state", result_type=type(snap.state))
        ask = req("offer", "book", slot="Mon 9").model_copy(
            update={"state_digest": state_digest(before), "epoch": snap.epoch}
        )
        short = await call.call_function(ask)
        assert short.outcome is not None and short.effects == [] and short.state is None
        assert short.decision == "end" and short.node == "booked" and short.derives_from is None
        step = function_step(engine, before, called(ask), short.outcome)
        assert step is not None and state_digest(step.state) == short.digest
        # the same call asked again without the digest (an agent one release older): the
        # whole answer, kept by the workflow, is the step the outcome made
        whole = await call.call_function(ask.model_copy(update={"state_digest": None}))
        assert whole.outcome is None and whole.digest is None
        assert whole.state == step.state and whole.effects == step.effects
        assert (whole.result, whole.run_llm, whole.decision) == (short.result, short.run_llm, short.decision)
        now = await call.handle.query("call_state", result_type=type(snap.state))
        assert now == step.state  # what the record will say is where the agent's engine went
        record = await call.handle.result()
    assert record.path == ["verify", "offer", "booked"] and record.disposition == "booked"


async def test_asked_from_another_state_the_answer_is_whole(
    temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    async with running_worker(temporal_client, task_queue, sqlite_url):
        call = await start(temporal_client, task_queue)
        snap = await call.attach("agent-1")
        agent = Agent(call, epoch=snap.epoch)
        await agent.transition("verify", "confirmed")
        await wait_state(call, lambda s: s.node == "offer", what="node offer")
        stale = state_digest(snap.state)  # the state before the transition: not the workflow's now
        ask = req("offer", "list_slots").model_copy(update={"state_digest": stale, "epoch": snap.epoch})
        res = await call.call_function(ask)
        assert res.outcome is None and res.digest is None and res.derives_from is None
        assert res.state is not None and res.state.node == "offer" and res.effects
        assert res.result == {"slots": ["Mon 9"]}
