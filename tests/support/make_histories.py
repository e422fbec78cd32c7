"""Record real CallWorkflow histories for the replay tests (``tests/workflows/test_replay.py``).

Each scenario plays one call of an example flow (``examples/flows``; the clinic test
fixture if the examples are missing) against a private dev server and a real worker,
the way an agent drives a call, and saves the workflow's history to
``tests/histories/<scenario>.json``. Replaying those with today's workflow code proves
that a change to ``workflows/`` (or to the engine it runs) still replays calls that
were started before the change, i.e. that deploying it will not break calls in flight.

So do NOT regenerate a history to make a failing replay test pass: the failure is the
finding. Make the change compatible (``workflow.patched`` with an id registered in
``workflows/patches.py``, see ``docs/versioning.md``). Regenerate only at a release, once no
call started on the previous one can still be running (``tests/histories/`` is then the new
release's baseline), and add new scenarios freely:

    make histories                                      # a release: every call and campaign
                                                        # history, then the release record
    .venv/bin/python tests/support/make_histories.py            # writes only missing files
    .venv/bin/python tests/support/make_histories.py --force    # rewrites every call history
    .venv/bin/python tests/support/make_histories.py --only lead_hangup

Everything in a history is fictional: names, years of birth, phone-free inputs. The
worker and client identities are fixed so no host name lands in the files, and flow
paths are relative to the repository. Extraction talks to the scripted LLM endpoint.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError  # noqa: E402
from temporalio.contrib.pydantic import pydantic_data_converter  # noqa: E402

from ringflow.activities.dispatch import Dispatcher, DispatchRequest, DispatchResult, NoAgentDispatcher  # noqa: E402
from ringflow.activities.persistence import dispose_engines  # noqa: E402
from ringflow.callflow.engine import Engine  # noqa: E402
from ringflow.callflow.loader import load_flow  # noqa: E402
from ringflow.callflow.model import FlowDefinition  # noqa: E402
from ringflow.contract.call import CallView  # noqa: E402
from ringflow.contract.events import (  # noqa: E402
    CallEvent,
    EventBatch,
    HangupEvent,
    Heartbeat,
    TransitionEvent,
    Turn,
    TurnsEvent,
)
from ringflow.contract.updates import CallFunctionRequest, CallFunctionResult  # noqa: E402
from ringflow.devstack import DevStack, free_port  # noqa: E402
from ringflow.settings import Settings  # noqa: E402
from ringflow.simulation.phone import LINES  # noqa: E402
from ringflow.simulation.scripted_llm import ScriptedLLM  # noqa: E402
from ringflow.workflows.client import CallHandle, start_call  # noqa: E402
from ringflow.workflows.worker import build_worker  # noqa: E402

HISTORIES = ROOT / "tests" / "histories"
EXAMPLES = Path("examples/flows")  # relative: it is recorded in the history as the flow's source
CLINIC = Path("tests/fixtures/wf/clinic.yaml")
IDENTITY = "make-histories"
T0 = 1_767_000_000.0  # a fixed base for the agent's event times, so files differ less between runs


def flow(name: str) -> FlowDefinition:
    path = EXAMPLES / name / "flow.yaml"
    return load_flow(path if path.is_file() else CLINIC)


class Agent:
    """Plays the agent's side with readable, deterministic event ids."""

    def __init__(self, call: CallHandle, prefix: str, epoch: int | None = None, seq: int = 0) -> None:
        self.call = call
        self.prefix = prefix
        self.seq = seq
        self.n = 0
        self.epoch = epoch  # an attached agent's, on everything it sends

    def _id(self, kind: str) -> str:
        self.n += 1
        return f"{self.prefix}-{kind}-{self.n}"

    def turns(self, *pairs: tuple[str, str]) -> TurnsEvent:
        self.seq += 1
        return TurnsEvent(
            event_id=self._id("turns"),
            seq=self.seq,
            at=T0 + self.seq,
            items=[Turn(role=r, text=t) for r, t in pairs],
            epoch=self.epoch,
        )

    def transition(self, from_node: str, name: str, /, **args: Any) -> TransitionEvent:
        self.seq += 1
        return TransitionEvent(
            event_id=self._id("tr"),
            seq=self.seq,
            from_node=from_node,
            name=name,
            args=args,
            at=T0 + self.seq,
            epoch=self.epoch,
        )

    async def say(self, *pairs: tuple[str, str]) -> None:
        await self.call.turns(self.turns(*pairs))

    async def fn(self, node: str, function: str, /, **args: Any) -> CallFunctionResult:
        return await self.call.call_function(
            CallFunctionRequest(
                event_id=self._id("fn"),
                node=node,
                name=function,
                args=args,
                at=T0 + self.seq,
                after_seq=self.seq if self.epoch else 0,
                epoch=self.epoch,
            )
        )


async def wait_for(
    call: CallHandle, pred: Callable[[CallView], bool], what: str, timeout: float = 30.0
) -> CallView:
    deadline = time.monotonic() + timeout
    while True:
        st = await call.state()
        if pred(st):
            return st
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}; state: {st}")
        await asyncio.sleep(0.05)


def check(cond: bool, what: str) -> None:
    """Scenarios check what they meant to record, so a history never captures a wrong path."""
    if not cond:
        raise AssertionError(what)


KAI = {"patient_first_name": "Kai", "appointment_id": "apt-1002", "appointment_time": "Friday at 11 AM"}


async def appointment_call(client: Client, tq: str, call_id: str, **fields: Any) -> CallHandle:
    """An appointment_reminder call for Kai (the scenarios that play one)."""
    return await start_call(
        client, flow("appointment_reminder"), task_queue=tq, call_id=call_id, variables=KAI, **fields
    )


# --- scenarios ----------------------------------------------------------------------------
# Each takes (client, task_queue) and returns the handles whose histories to save, by name.
Handles = dict[str, WorkflowHandle[Any, Any]]


async def appointment_happy(client: Client, tq: str) -> Handles:
    """Attach, turns, updates with a branch table looping on a node, a transition signal,
    a handler result choosing the end node, extraction on the way out of two nodes."""
    d = flow("appointment_reminder")
    call = await start_call(
        client,
        d,
        task_queue=tq,
        call_id="hist-appointment-happy",
        variables={
            "patient_first_name": "Robin",
            "appointment_id": "apt-1001",
            "appointment_time": "Tuesday at 3 PM",
        },
    )
    a = Agent(call, "ah")
    await call.attach("agent-hist-1")
    await a.say(
        ("assistant", "Hello, this is Ava from Maple Grove Dental. Am I speaking with Robin?"),
        ("user", "Yes, this is Robin."),
    )
    first = await a.fn("verify_identity", "check_identity", birth_year="1986")
    check(first.node == "verify_identity", f"mismatch stays: {first}")
    second = await a.fn("verify_identity", "check_identity", birth_year="1987")
    check(second.node == "remind", f"verified: {second}")
    await a.say(
        ("assistant", "You have an appointment Tuesday at 3 PM. Can you make it?"),
        ("user", "Not really, could we move it?"),
    )
    await call.transition(a.transition("remind", "needs_new_time"))
    await wait_for(call, lambda s: s.node == "reschedule", "node reschedule")
    slots = await a.fn("reschedule", "list_open_slots")
    check(slots.decision == "stay", f"list_open_slots: {slots}")
    taken = await a.fn("reschedule", "reschedule_appointment", slot="Wednesday 2 PM")
    check(taken.node == "reschedule", f"slot taken: {taken}")
    done = await a.fn("reschedule", "reschedule_appointment", slot="Thursday 9 AM")
    check(done.decision == "end" and done.node == "rescheduled", f"rescheduled: {done}")
    record = await call.handle.result()
    check(record.disposition == "rescheduled", f"record: {record.disposition}")
    return {"appointment_happy": call.handle}


async def appointment_out_of_order(client: Client, tq: str) -> Handles:
    """Sequenced events arriving late, early, twice, and a stale one, some in one batch."""
    call = await appointment_call(client, tq, "hist-appointment-out-of-order")
    a = Agent(call, "ao")
    verified = await a.fn("verify_identity", "check_identity", birth_year="1990")
    check(verified.node == "remind", f"verified: {verified}")
    first = a.turns(("assistant", "You have an appointment Friday at 11 AM."))
    second = a.turns(("user", "Yes, I will be there."))
    third = a.transition("remind", "will_attend")
    await call.transition(third)  # early: held until 1 and 2 are in
    await wait_for(call, lambda s: s.waiting_for_seq == 1, "seq 3 held")
    await call.turns(second)
    await call.turns(second)  # a duplicate while held
    await call.batch(EventBatch(events=[first, second, third]))  # gap filled, then duplicates
    stale = a.turns(("user", "Hello?"))
    await call.turns(stale.model_copy(update={"seq": 2}))  # another id for a used seq: rejected
    record = await call.handle.result()
    st = await call.state()
    check(record.path == ["verify_identity", "remind", "confirmed"], f"path: {record.path}")
    check(st.duplicates >= 3 and st.turns == 2, f"state: {st}")
    return {"appointment_out_of_order": call.handle}


async def lead_hangup(client: Client, tq: str) -> Handles:
    """A capture routed through a gate and an action node run by the workflow, then the
    caller hangs up in the middle of a node."""
    d = flow("lead_qualification")
    call = await start_call(
        client,
        d,
        task_queue=tq,
        call_id="hist-lead-hangup",
        direction="inbound",
        variables={"campaign": "webinar"},
    )
    a = Agent(call, "lh")
    await a.say(
        ("assistant", "Hi, thanks for calling Shiftwise, this is Sam."),
        ("user", "We are twelve people on shifts and want to plan them this quarter."),
    )
    needs = await a.fn(
        "discovery", "record_needs", use_case="shift_planning", team_size=12, timeline="this_quarter"
    )
    check(needs.decision == "transition", f"record_needs: {needs}")
    await wait_for(call, lambda s: s.node == "book_demo", "node book_demo")
    await call.event(CallEvent(event_id="lh-idle-1", kind="user_idle", at=T0 + 50))
    await a.say(("assistant", "Which weekday would suit you for a demo?"), ("user", "Sorry, I have to go."))
    await call.hangup(event_id="lh-hangup")
    record = await call.handle.result()
    check(record.end_reason == "user_hangup", f"record: {record.end_reason}")
    check(record.path[:4] == ["discovery", "size_gate", "score", "book_demo"], f"path: {record.path}")
    return {"lead_hangup": call.handle}


async def lead_trailing_node(client: Client, tq: str) -> Handles:
    """The trailing node: an attached call's transitions leave the node and transition
    count in search attributes for a later task; the hangup writes them."""
    d = flow("lead_qualification")
    call = await start_call(
        client, d, task_queue=tq, call_id="hist-lead-trailing-node", variables={"campaign": "webinar"}
    )
    a = Agent(call, "lt")
    await call.attach("agent-hist-lt")
    await a.say(("assistant", "Hi, this is Sam from Shiftwise."), ("user", "We are twelve people on shifts."))
    needs = await a.fn(
        "discovery", "record_needs", use_case="shift_planning", team_size=12, timeline="this_quarter"
    )
    check(needs.decision == "transition", f"record_needs: {needs}")
    await wait_for(call, lambda s: s.node == "book_demo", "node book_demo")
    await a.say(("assistant", "Which weekday would suit you for a demo?"), ("user", "I have to go, sorry."))
    await call.hangup(event_id="lt-hangup")
    record = await call.handle.result()
    check(record.end_reason == "user_hangup", f"record: {record.end_reason}")
    return {"lead_trailing_node": call.handle}


async def restaurant_continue_as_new(client: Client, tq: str) -> Handles:
    """A call long enough to continue as new (history limit set low): both runs are kept."""
    d = flow("restaurant_reservation")
    call = await start_call(client, d, task_queue=tq, call_id="hist-restaurant-can", max_history_events=50)
    a = Agent(call, "rc")
    size = await a.fn("party_size", "record_party_size", size=4)
    check(size.decision == "transition", f"record_party_size: {size}")
    await wait_for(call, lambda s: s.node == "get_time", "node get_time")
    full = await a.fn("get_time", "check_availability", time="7:00 PM", party_size=4)
    check(full.node == "offer_alternatives", f"7 PM full: {full}")
    for i in range(60):  # small talk, batched as the agent's outbox does, until the history is long
        await call.batch(
            EventBatch(
                events=[
                    a.turns(
                        ("assistant", f"We have 6 PM or 9 PM free (option {i})."), ("user", "Let me think.")
                    ),
                    a.turns(("user", "Is the terrace open?"), ("assistant", "Yes, it is.")),
                ]
            )
        )
        if i % 5 == 4 and (await call.state()).runs >= 2:
            break
    await wait_for(call, lambda s: s.runs >= 2, "continued as new")
    ok = await a.fn("offer_alternatives", "check_availability", time="9:00 PM", party_size=4)
    check(ok.node == "confirm_booking", f"9 PM: {ok}")
    noted = await a.fn("confirm_booking", "note_dietary_needs", needs="one guest is vegan")
    check(noted.run_llm is False, f"note_dietary_needs is silent: {noted}")
    booked = await a.fn("confirm_booking", "book_table", name="Jordan Sample")
    check(booked.node == "booked", f"book_table: {booked}")
    record = await call.handle.result()
    check(record.disposition == "booked", f"record: {record.disposition}")
    first = client.get_workflow_handle(call.handle.id, run_id=call.handle.first_execution_run_id)
    return {"restaurant_continue_as_new": first, "restaurant_continue_as_new_run2": call.handle}


async def appointment_agent_lost(client: Client, tq: str) -> Handles:
    """The agent goes silent: timers, failed re-dispatch activities, then an agent_lost end."""
    call = await appointment_call(
        client, tq, "hist-appointment-agent-lost", agent_timeout_s=1.0, max_dispatch_attempts=2
    )
    await call.heartbeat("agent-hist-2")
    record = await call.handle.result()
    check(record.end_reason == "agent_lost", f"record: {record.end_reason}")
    return {"appointment_agent_lost": call.handle}


class DispatchSlot:
    """The histories worker's dispatcher: none, except while ``phone_calls`` runs its LiveKit fake."""

    def __init__(self) -> None:
        self.current: Dispatcher = NoAgentDispatcher()

    async def dispatch(self, req: DispatchRequest) -> DispatchResult:
        return await self.current.dispatch(req)


DISPATCH = DispatchSlot()


async def phone_calls(client: Client, tq: str) -> Handles:
    """Telephony (issue 11) against the LiveKit fake: a dialed call (room, dispatch, dial
    activities) whose agent is reported lost by a room event and replaced; and an inbound
    call routed by keys (DTMF) to a cold transfer (the transfer activity)."""
    from ringflow.agents.livekit_api import LiveKitDispatcher
    from ringflow.agents.livekit_sip import LiveKitTelephony
    from ringflow.simulation.livekit_fake import FakeLiveKit

    async with FakeLiveKit() as lk:
        DISPATCH.current = LiveKitDispatcher(lk.url, lk.api_key, lk.api_secret)
        phone = LiveKitTelephony(lk.url, lk.api_key, lk.api_secret, trunk_id="ST_hist", ringing_timeout_s=20)
        try:
            with LINES.holding(phone):
                return await _phone_calls(client, tq, lk)
        finally:
            DISPATCH.current = NoAgentDispatcher()


async def _phone_calls(client: Client, tq: str, lk: Any) -> Handles:
    from livekit.protocol.models import SIGNAL_CLOSE, ParticipantInfo

    from ringflow.contract.dial import Dial
    from ringflow.contract.room import RoomEvent

    dialed = await start_call(
        client,
        flow("outbound_reminder"),
        task_queue=tq,
        call_id="hist-phone-dial",
        variables={"first_name": "Robin"},
        dial=Dial(to="+15550100"),
    )
    await wait_for(dialed, lambda s: s.status == "live", "the dialed call answered")
    a = Agent(dialed, "pd")
    await dialed.attach("agent-hist-1")
    await a.say(("assistant", "Hi Robin, this is Ava from Northside Energy with a quick reminder."))
    await dialed.room_event(
        RoomEvent(
            event_id="EV_hist_1",
            kind="agent_left",
            identity="agent-hist-1",
            reason="SIGNAL_CLOSE",
            at=T0 + 5,
        )
    )
    await wait_for(
        dialed,
        lambda s: any("left the room" in r.reason for r in s.rejected),
        "the lost agent noted",
    )
    await wait_for(
        dialed,
        lambda s: bool([d for d in lk.dispatches.values() if d.metadata_json().get("resume")]),
        "a replacement",
    )
    await dialed.attach("agent-hist-2")
    await a.say(("user", "Yes, I'll pay on Friday."))
    await dialed.transition(a.transition("remind", "will_pay"))
    await a.say(("assistant", "Thank you, Robin. Goodbye!"))
    await dialed.hangup("completed", event_id="pd-hangup")
    record = await dialed.handle.result()
    check(record.end_reason == "completed" and record.path == ["remind", "confirmed"], f"{record}")

    ivr = await start_call(
        client,
        flow("ivr_menu"),
        task_queue=tq,
        call_id="hist-phone-ivr",
        room="hist-phone-ivr",
        direction="inbound",
    )
    lk.add_participant("hist-phone-ivr", "sip-hist-caller", ParticipantInfo.SIP)
    b = Agent(ivr, "pi")
    await ivr.attach("agent-hist-3")
    await b.say(
        (
            "assistant",
            "Thanks for calling Northside Energy. Press 1 for billing, or 2 to speak to a person.",
        )
    )
    b.seq += 1
    await ivr.event(
        CallEvent(
            event_id="pi-keys",
            seq=b.seq,
            kind="dtmf",
            data={"digits": "9", "node": "menu"},
            at=T0 + b.seq,
        )
    )
    await ivr.transition(b.transition("menu", "to_billing"))
    out = await b.fn("billing", "billing_desk")
    check(out.decision == "end", f"transferred: {out}")
    await ivr.hangup("transferred", event_id="pi-hangup")
    record = await ivr.handle.result()
    check(record.end_reason == "transferred", f"{record.end_reason}")
    lk.remove_participant("hist-phone-ivr", "sip-hist-caller", SIGNAL_CLOSE)
    return {"phone_dial_agent_lost": dialed.handle, "phone_ivr_keys_transfer": ivr.handle}


async def hostile_inputs(client: Client, tq: str) -> Handles:
    """Issue 9's inputs on a long call: signals with no payload, a non-JSON one, an unknown
    name, a malformed event that keeps its seq, a seq skipped after the gap wait, a tool
    call repeated after continue-as-new (answered from the carried results), and a transcript
    split by continue-as-new, stored whole at the end. Both runs are kept."""
    from temporalio.api.common.v1 import Payload
    from temporalio.common import RawValue

    d = flow("restaurant_reservation")
    call = await start_call(
        client, d, task_queue=tq, call_id="hist-hostile", max_history_events=50, gap_wait_s=1.0
    )
    a = Agent(call, "hi")
    await call.handle.signal("hangup")
    await call.handle.signal(
        "transition", RawValue(Payload(metadata={"encoding": b"binary/plain"}, data=b"not json"))
    )
    await call.handle.signal("no_such_signal", {"x": 1})
    a.seq += 1
    await call.handle.signal(
        "turns",
        {"event_id": "hi-bad-1", "seq": a.seq, "items": [{"role": "user", "text": "?", "started_at": 1e20}]},
    )
    size = await a.fn("party_size", "record_party_size", size=4)
    check(size.decision == "transition", f"record_party_size: {size}")
    a.seq += 1  # this seq never arrives: skipped after gap_wait_s
    await a.say(("user", "Seven in the evening?"))
    await wait_for(call, lambda s: any("never arrived" in r.reason for r in s.rejected), "gap skipped")
    repeat = CallFunctionRequest(
        event_id="hi-fn-repeat",
        node="get_time",
        name="check_availability",
        args={"time": "7:00 PM", "party_size": 4},
        at=T0,
    )
    full = await call.call_function(repeat)
    check(full.node == "offer_alternatives", f"7 PM full: {full}")
    for i in range(30):  # more turns than a run carries: the head is stored at continue-as-new
        turns = a.turns(
            ("assistant", f"We have 6 PM or 9 PM free (option {i})."),
            ("user", "Let me think."),
            ("user", "Is the terrace open?"),
        )
        await call.batch(EventBatch(events=[turns]))
    await wait_for(call, lambda s: s.runs >= 2 and s.turns == 91, "continued as new")
    again = await call.call_function(repeat)
    check(again.result == full.result, f"repeat answered from the carried results: {again}")
    ok = await a.fn("offer_alternatives", "check_availability", time="9:00 PM", party_size=4)
    check(ok.node == "confirm_booking", f"9 PM: {ok}")
    booked = await a.fn("confirm_booking", "book_table", name="Jordan Sample")
    check(booked.node == "booked", f"book_table: {booked}")
    record = await call.handle.result()
    check(record.disposition == "booked" and record.transcript == [], f"record: {record.disposition}")
    first = client.get_workflow_handle(call.handle.id, run_id=call.handle.first_execution_run_id)
    return {"hostile_inputs": first, "hostile_inputs_run2": call.handle}


async def crm_mcp_tools(client: Client, tq: str) -> Handles:
    """MCP tools (issue 15): the servers' tools are listed in an activity when the call starts
    and pinned; tool calls (one offered under an entry's name, two of a tools: group) run as
    activities against the example CRM's MCP server, one routing the call on its result."""
    import subprocess

    import yaml

    from ringflow.callflow.loader import validate_data

    source = Path("examples/mcp/crm_mcp/flow.yaml")
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, str(source.parent / "crm_server.py"), str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        data = yaml.safe_load(source.read_text())
        data["mcp_servers"]["crm"]["url"] = f"http://127.0.0.1:{port}/mcp"
        report = validate_data(data, base_dir=source.parent, source=str(source))
        check(report.definition is not None, f"crm flow: {report.errors}")
        assert report.definition is not None
        deadline = time.monotonic() + 30
        while True:  # the server is up once a connection succeeds
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.close()
                break
            except OSError:
                check(time.monotonic() < deadline and proc.poll() is None, "the CRM server did not start")
                await asyncio.sleep(0.1)
        call = await start_call(client, report.definition, task_queue=tq, call_id="hist-crm-mcp")
        a = Agent(call, "cm")
        snap = await call.attach("agent-hist-crm")
        node = Engine(snap.definition).snapshot(snap.state)
        names = [t.name for t in node.tools] if node else []
        check(names == ["find_customer"], f"pinned tools: {names}")
        await a.say(
            ("assistant", "Hello, this is Ava at Northwind. What's your account's phone number?"),
            ("user", "It's 555 0100."),
        )
        found = await a.fn("identify", "find_customer", phone="+15550100")
        check(found.node == "help" and found.result["name"] == "Dana Reyes", f"find_customer: {found}")
        status = await a.fn("help", "order_status", order_id="A-1001")
        check("Thursday" in status.result["status"], f"order_status: {status}")
        ticket = await a.fn("help", "open_ticket", summary="The last box arrived broken")
        check(str(ticket.result.get("ticket", "")).startswith("T-"), f"open_ticket: {ticket}")
        await call.transition(a.transition("help", "all_done"))
        await wait_for(call, lambda s: s.node == "goodbye", "node goodbye")
        await a.say(("assistant", "Thanks for calling Northwind, Dana. Goodbye!"))
        await call.hangup("completed", event_id="cm-hangup")
        record = await call.handle.result()
        check(record.disposition == "helped", f"record: {record.disposition}")
    finally:
        proc.terminate()
        proc.wait(10)
    return {"crm_mcp_tools": call.handle}


async def kiosk_empty_inputs(client: Client, tq: str) -> Handles:
    """Empty inputs of every kind (``UserIdle.kind``) on a push-to-talk kiosk that
    waits instead of hanging up: an empty press, speech with no words, a kind that is not
    one (refused), silences past the give-up mark (no end), then the guest speaks and a
    handler checks them in."""
    d = flow("kiosk")
    call = await start_call(client, d, task_queue=tq, call_id="hist-kiosk-empty", direction="inbound")
    a = Agent(call, "ke")
    await call.attach("agent-hist-kiosk")
    await a.say(
        ("assistant", "Welcome to the Harbour Hotel. Hold the button and tell me the name on your booking.")
    )
    for kind in ("empty_turn", "empty_transcript", "shrug", None, None):
        a.seq += 1
        await call.event(
            CallEvent(
                event_id=a._id("idle"),
                seq=a.seq,
                kind="user_idle",
                at=T0 + a.seq,
                data={} if kind is None else {"kind": kind},
            )
        )
    st = await wait_for(call, lambda s: s.next_seq == a.seq + 1, "the idle events applied")
    check(
        st.status == "live" and any(r.event_id == "ke-idle-4" for r in st.rejected),
        f"kiosk waits, the bad kind refused: {st}",
    )
    await a.say(("user", "Morgan Lee."))
    found = await a.fn("welcome", "find_booking", name="Morgan Lee")
    check(found.node == "checked_in", f"find_booking: {found}")
    await a.say(("assistant", "Thank you, Morgan Lee. Your key card for room 412 is printing."))
    await call.hangup("completed", event_id="ke-hangup")
    record = await call.handle.result()
    check(record.disposition == "checked_in", f"record: {record.disposition}")
    return {"kiosk_empty_inputs": call.handle}


async def appointment_replaced_agent(client: Client, tq: str) -> Handles:
    """Agent B attaches while agent A still talks (issue 23 §4): A's heartbeat, transition
    and node function are refused for A's epoch; B's turns and transition carry the call."""
    call = await appointment_call(client, tq, "hist-appointment-replaced-agent")
    snap_a = await call.attach("agent-hist-a")
    a = Agent(call, "ra", epoch=snap_a.epoch)
    verified = await a.fn("verify_identity", "check_identity", birth_year="1990")
    check(verified.node == "remind", f"verified: {verified}")
    await a.say(("assistant", "You have an appointment Friday at 11 AM."))
    await wait_for(call, lambda s: s.turns == 1, "A's turn")
    snap_b = await call.attach("agent-hist-b")
    b = Agent(call, "rb", epoch=snap_b.epoch, seq=snap_b.next_seq - 1)
    await call.handle.signal("heartbeat", Heartbeat(agent_id="agent-hist-a", at=T0 + 50, epoch=snap_a.epoch))
    await call.transition(a.transition("remind", "cancel_appointment"))
    try:
        await a.fn("remind", "cancel_appointment")
        check(False, "A's node function was not refused")
    except WorkflowUpdateFailedError:
        pass
    await b.say(("user", "Sorry, who is this?"), ("assistant", "Maple Grove Dental, about Friday at 11 AM."))
    await b.say(("user", "Yes, I will be there."))
    await call.transition(b.transition("remind", "will_attend"))
    await wait_for(call, lambda s: s.node == "confirmed", "B's transition")
    await call.handle.signal(
        "hangup", HangupEvent(event_id="rb-hangup", reason="completed", at=T0 + 90, epoch=snap_b.epoch)
    )
    record = await call.handle.result()
    st = await call.state()
    check(record.path == ["verify_identity", "remind", "confirmed"], f"path: {record.path}")
    check(st.epoch == 2 and st.agent_id == "agent-hist-b" and st.turns == 4, f"state: {st}")
    return {"appointment_replaced_agent": call.handle}


SCENARIOS: dict[str, Callable[[Client, str], Awaitable[Handles]]] = {
    "appointment_happy": appointment_happy,
    "appointment_out_of_order": appointment_out_of_order,
    "lead_hangup": lead_hangup,
    "lead_trailing_node": lead_trailing_node,
    "restaurant_continue_as_new": restaurant_continue_as_new,
    "appointment_agent_lost": appointment_agent_lost,
    "phone_calls": phone_calls,
    "hostile_inputs": hostile_inputs,
    "crm_mcp_tools": crm_mcp_tools,
    "kiosk_empty_inputs": kiosk_empty_inputs,
    "appointment_replaced_agent": appointment_replaced_agent,
}


FIRST_FILE = {"phone_calls": "phone_dial_agent_lost"}  # scenarios saving files under other names


@dataclass
class Options:
    force: bool
    only: list[str]


async def record_all(opts: Options) -> list[Path]:
    todo = [
        n
        for n in SCENARIOS
        if (not opts.only or n in opts.only)
        and (opts.force or not (HISTORIES / f"{FIRST_FILE.get(n, n)}.json").exists())
    ]
    if not todo:
        return []
    HISTORIES.mkdir(exist_ok=True)
    written: list[Path] = []
    with tempfile.TemporaryDirectory(prefix="ringflow-histories-") as tmp:
        stack = DevStack(
            port=free_port(), ui_port=free_port(), data_dir=Path(tmp) / "temporal", headless=True
        )
        await stack.start()
        try:
            async with ScriptedLLM() as llm:
                lane = llm.lane()
                lane.set_extract("verify_identity", {"reached_patient": True})
                lane.set_extract("remind", {"attending": "no"})
                lane.set_extract("discovery", {"caller_role": "operations lead"})
                lane.set_extract("party_size", {})
                lane.set_extract("welcome", {})
                client = await Client.connect(
                    stack.address,
                    namespace=stack.namespace,
                    identity=IDENTITY,
                    data_converter=pydantic_data_converter,
                )
                settings = Settings(
                    database_url=f"sqlite:///{Path(tmp) / 'ringflow.db'}",
                    http_allow_private=True,
                    webhook_url=None,
                    openai_base_url=llm.base_url,  # the extraction activity's LLM
                )
                tq = "histories"
                async with build_worker(
                    client, settings, task_queue=tq, identity=IDENTITY, dispatcher=DISPATCH, telephony=LINES
                ):
                    for name in todo:
                        handles = await SCENARIOS[name](client, tq)
                        for file_name, handle in handles.items():
                            history = await handle.fetch_history()
                            path = HISTORIES / f"{file_name}.json"
                            path.write_text(history.to_json() + "\n")
                            written.append(path)
                            print(f"{path.relative_to(ROOT)}: {len(history.events)} events")
        finally:
            dispose_engines()
            stack.stop()
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--force", action="store_true", help="rewrite existing histories")
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        choices=sorted(SCENARIOS),
        help="record just this scenario (repeatable)",
    )
    args = parser.parse_args()
    os.chdir(ROOT)  # flow sources, and so handler modules, are found relative to the repository
    asyncio.run(record_all(Options(force=args.force, only=args.only)))


if __name__ == "__main__":
    main()
