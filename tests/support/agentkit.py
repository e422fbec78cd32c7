"""Helpers for text-mode agent tests: a real ``CallWorkflow`` and a real ``AgentSession``.

A :class:`TextCall` is one call on the dev server with the real agent code attached
(``attach_agent``) in livekit-agents' text mode: no room, no STT/TTS, and the livekit
OpenAI plugin pointed at a :class:`ScriptedLLM` lane named after the call. Tests drive
it as the simulator does (``session.run(user_input=...)``, ``controller.on_idle()``)
and synchronise on conditions (the outbox flushed, a request recorded, the session
idle), never on sleeps.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from livekit.agents import AgentSession, RunResult, SpeechCreatedEvent
from livekit.agents import llm as lk_llm
from livekit.plugins import openai as lk_openai
from temporalio.client import Client

from ringflow.agents.controller import FlowController
from ringflow.agents.runner import AgentRun, attach_agent
from ringflow.callflow.loader import load_flow
from ringflow.callflow.model import FlowDefinition
from ringflow.contract.call import CallView
from ringflow.contract.records import CallRecord
from ringflow.contract.updates import Snapshot
from ringflow.simulation.scripted_llm import LANE_HEADER, Lane, RecordedRequest, ScriptedLLM
from ringflow.workflows.client import CallHandle, start_call
from tests.support.paths import TESTS

FIXTURES = TESTS / "fixtures" / "agent"
# Every wait in these tests: a bound for a hung test, not a speed requirement. Each wait
# ends on its condition (a Temporal round trip, the session idle), in milliseconds on an
# idle machine, but seconds when several suites share two loaded cores.
TIMEOUT_S = 60.0


def desk() -> FlowDefinition:
    """The test flow: one node per agent behaviour under test (see the YAML)."""
    return load_flow(FIXTURES / "desk.yaml")


def system_prompt(req: RecordedRequest) -> str:
    """The request's system message: the node prompt the LLM was given."""
    first = req.messages[0] if req.messages else {}
    return str(first.get("content")) if first.get("role") in ("system", "developer") else ""


def said(req: RecordedRequest, role: str) -> list[str]:
    """Texts of the request's messages of one role, in order."""
    return [str(m.get("content")) for m in req.messages if m.get("role") == role]


@dataclass
class Speech:
    """A speech handle as it was created, with where it came from (``say``/``generate_reply``)."""

    source: str
    allow_interruptions: bool
    node: str | None


@dataclass
class TextCall:
    """One call under test: its workflow handle, its LLM lane, and the agents attached to it
    in turn (the last is the live one; earlier ones were killed)."""

    client: Client
    call: CallHandle
    llm: ScriptedLLM
    lane: Lane
    definition: FlowDefinition
    runs: list[AgentRun] = field(default_factory=list)
    speeches: list[Speech] = field(default_factory=list)
    turn_no: int = 0
    # builds each agent's voice stack (``attach_agent(voice=...)``) for this call
    voice: Callable[[TextCall], Any] | None = None

    # --- the agent --------------------------------------------------------------------
    @property
    def run(self) -> AgentRun:
        return self.runs[-1]

    @property
    def controller(self) -> FlowController:
        return self.run.controller

    @property
    def session(self) -> AgentSession:
        return self.run.session

    def scripted_model(self, **options: Any) -> lk_openai.LLM:
        """The OpenAI plugin on this call's lane (``options``: the plugin's, e.g. temperature)."""
        return lk_openai.LLM(
            model="scripted",
            base_url=self.llm.base_url,
            api_key="scripted",
            extra_headers={LANE_HEADER: self.call.call_id},
            **options,
        )

    def session_factory(self, snap: Snapshot) -> AgentSession:
        """The session ``attach_agent`` starts: the OpenAI plugin on this call's lane."""
        model = self.scripted_model()
        session: AgentSession = AgentSession(llm=model, user_away_timeout=None)

        def on_speech(ev: SpeechCreatedEvent) -> None:
            ctrl = getattr(session.current_agent, "controller", None)
            node = ctrl.node if isinstance(ctrl, FlowController) else snap.node
            self.speeches.append(Speech(ev.source, ev.speech_handle.allow_interruptions, node))

        session.on("speech_created", on_speech)
        return session

    async def attach(self, **options: Any) -> AgentRun:
        """A new agent on the call, as a dispatcher would start one (fresh or after a crash);
        ``options`` go to ``attach_agent`` over the test defaults (no heartbeats)."""
        run = await attach_agent(
            self.client,
            self.call.call_id,
            f"agent-{uuid.uuid4().hex[:6]}",
            **{
                "session_factory": self.session_factory,
                "idle_from_session": False,
                "heartbeat_s": 0,
                "own_max_duration": False,
            }
            | ({"voice": self.voice(self)} if self.voice is not None else {})
            | options,
        )
        self.runs.append(run)
        await self.idle()
        return run

    # --- driving ------------------------------------------------------------------------
    async def idle(self) -> None:
        """Wait until the session has nothing to say or run (its speech queue drained)."""
        await asyncio.wait_for(self.session.wait_for_idle(), TIMEOUT_S)

    async def user(self, text: str) -> RunResult[Any]:
        """One caller turn, played to completion: every reply and tool call it caused."""
        self.turn_no += 1
        self.controller.begin_turn(f"t{self.turn_no}")
        result: RunResult[Any] = await asyncio.wait_for(self.session.run(user_input=text), TIMEOUT_S)
        await self.idle()
        return result

    async def silence(self) -> None:
        """One ``idle.timeout_s`` of silence, as the session's away timer would report it."""
        self.turn_no += 1
        self.controller.begin_turn(f"idle{self.turn_no}")
        await asyncio.wait_for(self.controller.on_idle(), TIMEOUT_S)
        await self.idle()

    # --- the workflow -----------------------------------------------------------------
    async def synced(self) -> CallView:
        """The workflow's state once everything the agent queued has been delivered."""
        assert await self.controller.outbox.flush(timeout=TIMEOUT_S), "outbox did not flush"
        return await self.call.state()

    async def ended(self) -> CallRecord:
        """The call's final record, after the agent's own hang-up task (if any) finished."""
        ending = self.controller.ending
        if ending is not None:
            await asyncio.wait_for(ending, TIMEOUT_S)
        record: CallRecord = await asyncio.wait_for(self.call.handle.result(), TIMEOUT_S)
        return record

    # --- the LLM ------------------------------------------------------------------------
    def chats(self, with_tools: bool | None = None) -> list[RecordedRequest]:
        """Chat requests on this call's lane (those offering tools, or not, if asked)."""
        reqs = self.lane.of_kind("chat")
        if with_tools is None:
            return reqs
        return [r for r in reqs if bool(r.tools) == with_tools]

    async def request(self, index: int, answered: bool = True) -> RecordedRequest:
        """The ``index``-th chat request (0-based), waiting for it to arrive."""
        reqs = await self.lane.wait_requests(index + 1, "chat", answered=answered, timeout=TIMEOUT_S)
        return reqs[index]

    def reply(self, *steps: dict[str, Any]) -> None:
        """Queue the scripted LLM's next reply: ``call(name, **args)`` and ``say(text)`` steps."""
        self.lane.queue_reply(list(steps))

    def history(self) -> list[lk_llm.ChatItem]:
        """The live session's conversation items (what livekit will build requests from)."""
        return list(self.session.history.items)


def call(name: str, **args: Any) -> dict[str, Any]:
    """A scripted reply step: the LLM calls ``name`` with ``args``."""
    return {"call": name, "args": args}


def say(text: str) -> dict[str, Any]:
    """A scripted reply step: the LLM says ``text`` (after a call: once the results are back)."""
    return {"say": text}


@asynccontextmanager
async def text_call(
    client: Client,
    task_queue: str,
    llm: ScriptedLLM,
    *,
    definition: FlowDefinition | None = None,
    variables: dict[str, Any] | None = None,
    agent: dict[str, Any] | None = None,
    voice: Callable[[TextCall], Any] | None = None,
    **fields: Any,
) -> AsyncIterator[TextCall]:
    """Start a call (a worker must be polling ``task_queue``) and attach an agent to it
    (``agent``: options for ``attach_agent``; ``fields``: the call's input beyond the flow).

    On exit the agents are closed and a call still running is terminated, so no workflow
    outlives its test.
    """
    definition = definition or desk()
    call_id = f"txt-{uuid.uuid4().hex[:10]}"
    lane = llm.lane(call_id)
    handle = await start_call(
        client, definition, task_queue=task_queue, call_id=call_id, variables=variables or {}, **fields
    )
    tc = TextCall(client, handle, llm, lane, definition, voice=voice)
    try:
        await tc.attach(**(agent or {}))
        yield tc
    finally:
        for run in tc.runs:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(run.kill(), TIMEOUT_S)
        with contextlib.suppress(Exception):
            desc = await handle.handle.describe()
            if desc.status is not None and desc.status.name == "RUNNING":
                await handle.handle.terminate("test over")
        llm.lanes.pop(call_id, None)
