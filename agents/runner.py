"""Attaching an agent to a call: the same code for a LiveKit room and for text mode.

``attach_agent`` asks the workflow for a snapshot, rebuilds the node's prompt, tools
and chat context from it, and starts an ``AgentSession``. A fresh call gets its
greeting; a resumed one (the transcript shows someone already spoke) carries on
without greeting again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from livekit.agents import AgentSession, ConversationItemAddedEvent, UserStateChangedEvent
from livekit.agents import llm as lk_llm
from opentelemetry import context as otel_context
from opentelemetry import trace
from temporalio.client import Client

from ringflow.agents import metrics as agent_metrics
from ringflow.agents.call_trace import call_context
from ringflow.agents.controller import FlowController
from ringflow.agents.flow_agent import SUMMARY_PREFIX, FlowAgent, LiveKitPort, segment_text
from ringflow.agents.hooks import NO_HOOKS, AgentHooks
from ringflow.agents.jobs import JobsFeed, has_jobs, offer_cancel
from ringflow.agents.journal import OutboxJournal
from ringflow.agents.lease import AgentLease, LeaseCheck
from ringflow.agents.listen import EmptySpeechWatch, PushToTalk
from ringflow.agents.logcontext import bind_call
from ringflow.agents.outbox import Outbox, ReceiverGone
from ringflow.agents.signals import workflow_sender
from ringflow.agents.supervised import SUPERVISOR_BACKSTOP_S, SUPERVISOR_POLL_S, SupervisorFeed
from ringflow.agents.supervision_nudge import Nudges
from ringflow.agents.supervisor_voice import SupervisorVoice
from ringflow.agents.voice import VoiceControl, VoiceStack
from ringflow.callflow.effects import Effect, EndCall, SetNode
from ringflow.callflow.jobs import JOBS_PREFIX
from ringflow.contract.events import Turn
from ringflow.contract.supervision import WHISPER_PREFIX
from ringflow.contract.updates import Snapshot
from ringflow.workflows.client import CallHandle, workflow_id

log = logging.getLogger(__name__)
TRACER = trace.get_tracer("ringflow.agent")
HEARTBEAT_S = 5.0
# The heartbeat task runs at least this often, however long the interval (60 s with LiveKit's
# webhooks, ringflow/settings.py): each round checks the lease (or the epoch), so a replaced
# agent learns it within this, and offers a heartbeat, which the outbox skips while another
# send went out within the interval. A quiet agent's sends are then at most an interval and
# one round apart, not two intervals.
HEARTBEAT_CHECK_S = 20.0
# Turns wait at most this long for a transition, line event or heartbeat to ride with
# (agents/outbox.py, "Coalescing"): well under the workflow's agent timeout, and what a crash
# of the agent can cost beyond its last successful send. Measured in bench/load.py.
LINGER_S = 2.0
MAX_DURATION_MARGIN_S = 5.0


def chat_context(turns: list[Turn], node: str | None = None) -> lk_llm.ChatContext:
    """The conversation so far, for an agent that takes over mid-call; with ``node``, only
    the turns since the call came to that node (one entered with a context reset), the
    summary a ``reset_with_summary`` node started from included, as its agent had it."""
    if node is not None:
        start = len(turns)
        while start > 0 and turns[start - 1].node == node:
            start -= 1
        turns = turns[start:]
    ctx = lk_llm.ChatContext.empty()
    for t in turns:
        if t.role in ("user", "assistant") and t.text:
            ctx.add_message(role=t.role, content=t.text)
        elif t.role == "system" and t.text.startswith(SUMMARY_PREFIX):
            ctx.add_message(role="assistant", content=t.text)
        elif t.role == "system" and t.text.startswith((JOBS_PREFIX, WHISPER_PREFIX)):  # as added live
            ctx.add_message(role="system", content=t.text)
        elif t.role == "supervisor" and t.text:  # a takeover's lines, as the bot heard them
            ctx.add_message(role="assistant", content=segment_text(t.role, t.text))
    return ctx


def unsaid_last_turn(controller: FlowController, snap: Snapshot) -> list[Effect]:
    """The end node's last turn, when the call reached it but nobody has said it yet.

    Entering an end node ends the call at once in the engine, and the workflow then waits
    for the agent to speak the node's turn (the goodbye, what the end node's extraction
    reads) and hang up. An agent that died in between (after a node function routed the
    call there, before the reply) leaves a call that is ended but unspoken: its successor
    must say that turn before hanging up, not drop the caller in silence.
    """
    state = snap.state
    if state.end_reason != "completed" or state.node is None:
        return []
    if any(t.role == "assistant" and t.node == state.node and t.text for t in snap.transcript_tail):
        return []  # said already: only the hangup is missing
    # what entering the node says (pre-action speech, greeting or LLM turn, a goodbye); the
    # hangup is the caller's to add, and the context is the one the transcript rebuilt
    return [
        e.model_copy(update={"context": "append"}) if isinstance(e, SetNode) else e
        for e in controller.engine.arrival(state)
        if not isinstance(e, EndCall)
    ]


@dataclass
class AgentRun:
    """One agent on one call; ``kill()`` drops it as a crash would, ``close()`` politely."""

    call: CallHandle
    snapshot: Snapshot
    controller: FlowController
    session: AgentSession
    agent: FlowAgent
    outbox: Outbox
    resumed: bool
    tasks: list[asyncio.Task[Any]] = field(default_factory=list)
    talk: PushToTalk | None = None  # the client's push-to-talk on ``listen: manual`` nodes
    empty_speech: EmptySpeechWatch | None = None  # speech heard, no words transcribed
    # set once this agent stopped because another one has the call: its process leaves the
    # room (never closes it: the caller is the other agent's now), ringflow/agent_server.py
    left: asyncio.Event = field(default_factory=asyncio.Event)
    left_why: str | None = None
    supervisors: SupervisorFeed | None = None  # the call's supervision, polled (agents/supervised.py)
    # a supervisor's speech during a takeover, transcribed (agents/supervisor_voice.py); the
    # room's tracks reach it through ``watch_supervisors``
    supervisor_voice: SupervisorVoice | None = None

    def _stop_hearing(self) -> None:
        if self.empty_speech is not None:
            self.empty_speech.close()
        if self.supervisor_voice is not None:
            self.supervisor_voice.close()

    async def kill(self) -> None:
        # Dead as a crashed process: what the closing session still emits (a reply that was
        # under way) must not reach the controller, whose outbox is gone (OutboxClosed).
        self.controller.dead = True
        self.outbox.abandon()
        self.controller.values.stop()
        for t in self.tasks:
            t.cancel()
        self._stop_hearing()
        with contextlib.suppress(Exception):
            await self.session.aclose()

    def leave(self, why: str) -> None:
        """The controller's ``on_stopped``: a newer agent has the call (the workflow refused
        an update for its epoch, the lease was taken, or a heartbeat's check found a newer
        epoch). What this agent still holds is dropped as a crash would (its events would be
        refused), and whoever runs it disconnects from the room."""
        if self.left.is_set():
            return
        self.left_why = why
        self.left.set()
        self.controller.dead = True
        self.outbox.abandon()
        current = asyncio.current_task()
        for t in self.tasks:
            if t is not current:
                t.cancel()
        self._stop_hearing()
        self.tasks.append(asyncio.get_running_loop().create_task(self._close_session()))

    async def _close_session(self) -> None:
        with contextlib.suppress(Exception):
            await self.session.interrupt(force=True)
        with contextlib.suppress(Exception):
            await self.session.aclose()

    def outbox_failed(self, exc: BaseException) -> None:
        """The outbox's ``on_error``. On :class:`ReceiverGone` the workflow has completed
        (an operator hung up, or its backstop ended the call): nothing this agent does can
        reach the call's record any more, so it goes quiet and hangs up, as on an end node.
        Other failures are retried by the outbox and need nothing here."""
        if not isinstance(exc, ReceiverGone) or self.controller.dead:
            return
        log.warning("call %s ended without this agent (%s): leaving", self.call.call_id, exc)
        self.controller.dead = True
        port = self.controller.port
        if port is not None:
            # the reason goes nowhere (a dead controller sends nothing): the workflow has its own
            reason = self.controller.state.end_reason or "user_hangup"
            self.tasks.append(asyncio.get_running_loop().create_task(port.end_call(reason)))

    async def close(self) -> None:
        self.controller.values.stop()
        for t in self.tasks:
            t.cancel()
        self._stop_hearing()
        with contextlib.suppress(Exception):
            await self.outbox.close(5.0)
        with contextlib.suppress(Exception):
            await self.session.aclose()


async def attach_agent(
    client: Client,
    call_id: str,
    agent_id: str,
    *,
    session_factory: Callable[[Snapshot], AgentSession],
    room: Any = None,
    close_room: Callable[[], Awaitable[None]] | None = None,
    clock: Callable[[], float] = time.time,
    hooks: AgentHooks = NO_HOOKS,
    idle_from_session: bool = True,
    heartbeat_s: float = HEARTBEAT_S,
    own_max_duration: bool = True,
    answer_pending: bool = True,
    greet: bool = True,
    lease: AgentLease | None = None,
    lease_fresh_s: float = 0.5,
    warn_unleased: bool = True,
    journal: Any = None,
    supervisor_poll_s: float = SUPERVISOR_POLL_S,
    voice: VoiceStack | None = None,
    nudges: Any = None,
    supervisor_backstop_s: float = SUPERVISOR_BACKSTOP_S,
) -> AgentRun:
    """Attach ``agent_id`` to the call and start serving it, traced and timed: attach/resume
    time is what a resumed caller waits through.

    ``session_factory`` builds the ``AgentSession`` (LiveKit's, or text mode's with no room);
    ``room`` and ``close_room`` are the LiveKit room and how to close it; ``hooks`` is the
    simulation's seam (``agents/hooks.py``; production passes none); ``idle_from_session``
    takes silences from the session's user-away state, ``heartbeat_s`` (0: none) is the
    heartbeat interval, ``own_max_duration`` runs the agent's own time limit,
    ``answer_pending`` answers a caller the dead agent left unanswered, ``greet`` says the
    greeting on a fresh call (not while answering-machine detection decides), ``lease`` and
    ``journal`` (a Redis client) keep one agent per call and its queued events in Redis
    (``lease_fresh_s``: how long a lease check holds; ``warn_unleased``: say so when there
    is no lease); ``supervisor_poll_s`` (0: none) is how often the call's supervision is read
    (``agents/supervised.py``; ``AgentRun.supervisors.poll`` reads it at once); with
    ``nudges`` (a Redis client) it is read when a supervisor's command publishes on the
    call's channel, and every ``supervisor_backstop_s`` (``agents/supervision_nudge.py``);
    ``voice`` builds what the flow's ``voice:`` settings name (``agents/voice.py``:
    without it the session keeps what ``session_factory`` gave it)."""
    started = time.perf_counter()
    # The call's trace (agents/call_trace.py; None with tracing off) is the current context
    # for everything started here: the session's and the outbox's tasks take it along, so
    # turns, tool calls and signals are the call's spans, under its one root. The attach span
    # is current only around the attach updates (``_Options.span``), or it would be the
    # parent of everything the call does afterwards.
    call_ctx = await call_context(client, call_id)
    span = TRACER.start_span("ringflow.agent.attach", call_ctx, attributes={"ringflow.call_id": call_id})
    token = otel_context.attach(call_ctx) if call_ctx is not None else None
    try:
        run = await _attach_agent(
            client,
            call_id,
            agent_id,
            _Options(
                session_factory,
                room,
                close_room,
                clock,
                hooks,
                idle_from_session,
                heartbeat_s,
                own_max_duration,
                answer_pending,
                greet,
                lease,
                lease_fresh_s,
                warn_unleased,
                journal,
                span,
                supervisor_poll_s,
                voice,
                nudges,
                supervisor_backstop_s,
            ),
        )
        span.set_attribute("ringflow.resumed", run.resumed)
    finally:
        span.end()
        if token is not None:
            otel_context.detach(token)
    resumed = "true" if run.resumed else "false"
    agent_metrics.ATTACH_SECONDS.labels(resumed).observe(time.perf_counter() - started)
    agent_metrics.track(run)
    return run


@dataclass(frozen=True, slots=True)
class _Options:
    """``attach_agent``'s keyword arguments, as it documents them."""

    session_factory: Callable[[Snapshot], AgentSession]
    room: Any
    close_room: Callable[[], Awaitable[None]] | None
    clock: Callable[[], float]
    hooks: AgentHooks
    idle_from_session: bool
    heartbeat_s: float
    own_max_duration: bool
    answer_pending: bool
    greet: bool
    lease: AgentLease | None
    lease_fresh_s: float
    warn_unleased: bool
    journal: Any
    span: Any  # the attach's span: current while the attach updates go
    supervisor_poll_s: float
    voice: VoiceStack | None = None
    nudges: Any = None  # a Redis client: supervisors' commands wake the read
    supervisor_backstop_s: float = SUPERVISOR_BACKSTOP_S


async def _attach_agent(client: Client, call_id: str, agent_id: str, o: _Options) -> AgentRun:
    session_factory, room, close_room, clock = o.session_factory, o.room, o.close_room, o.clock
    idle_from_session, heartbeat_s, own_max_duration = o.idle_from_session, o.heartbeat_s, o.own_max_duration
    answer_pending, greet, lease, journal = o.answer_pending, o.greet, o.lease, o.journal
    lease_fresh_s, warn_unleased = o.lease_fresh_s, o.warn_unleased
    if lease is not None:
        await lease.acquire(call_id, agent_id)  # raises LeaseHeld: another agent is on the call
    call = CallHandle(client, call_id)
    with trace.use_span(o.span, end_on_exit=False):
        snap = await call.attach(agent_id)
        if not snap.ended and any(run.purpose == "action_node" for run in snap.state.pending.values()):
            # On an action node (a start node that looks something up before the call, or one
            # a dead agent's transition entered): the workflow is running its function and will
            # route on the result. The agent starts where that goes, with that node's prompt,
            # tools and greeting, not on a node where no LLM runs.
            snap = await call.attach(
                agent_id, after_seq=snap.next_seq - 1, settle=True, epoch=snap.epoch or None
            )
    # A heartbeat goes only when nothing else went out for a whole interval: any delivered
    # event keeps the call alive in the workflow, so a talking call sends no heartbeats.
    # Turns linger (agents/outbox.py, "Coalescing"): they ride with the next event that goes at
    # once. Nothing the workflow does on the agent's behalf misses them: a function call's
    # update waits for every seq before it (kick, below in the controller), a settle flushes,
    # and a call the workflow ends (a transfer, the caller's webhook) waits for the agent's
    # hangup, which carries them (workflows/agent_presence.py: agent_catches_up).
    # With a journal (a Redis client: ``journal``) every queued event is in Redis before it
    # lingers, so turns may wait a whole heartbeat interval for company (agents/journal.py):
    # one signal per state change or interval, and a crash still loses none of them.
    linger = min(LINGER_S, heartbeat_s or LINGER_S)
    journaled = OutboxJournal(journal, call_id) if journal is not None else None
    outbox = Outbox(
        workflow_sender(call),
        linger_s=linger,
        heartbeat_quiet_s=heartbeat_s,
        journal=journaled,
        journaled_linger_s=heartbeat_s if journaled is not None else 0.0,
    )
    if journaled is not None:
        journaled.on_unhealthy = outbox.kick
    outbox.start()
    controller = FlowController(call, snap, outbox, agent_id, clock=clock, hooks=o.hooks)
    if lease is not None:
        controller.lease_held = LeaseCheck(lease, call_id, agent_id, fresh_s=lease_fresh_s).held
    elif warn_unleased:  # not the simulator's agents: it dispatches them, one at a time
        log.warning(
            "agent %s serves call %s without a lease (no RINGFLOW_REDIS_URL): nothing keeps a second "
            "agent off this call's line; the workflow refuses what a replaced agent sends, and this "
            "agent learns it was replaced at its next update or heartbeat",
            agent_id,
            call_id,
            extra={"event": "agent_without_lease", "agent_id": agent_id},
        )
    bind_call(call_id, workflow_id(call_id), lambda: controller.node)  # every log line from here on
    # Someone spoke: a resume. Notes about the line (the dial's outcome: system turns on no
    # node) are not conversation, and a dialed call's first agent still greets.
    resumed = any(t.role != "system" or t.node is not None for t in snap.transcript_tail)
    if has_jobs(controller):
        controller.jobs = JobsFeed(controller)
        await controller.jobs.prime_or_later()
    first = controller.current_tools()
    if first is not None:
        first = offer_cancel(controller, first)
    since = first.node if first is not None and first.context != "append" else None
    agent = FlowAgent(controller, first, chat_context(snap.transcript_tail, since))
    session = session_factory(snap)
    port = LiveKitPort(session, agent, close=close_room)
    room_options: Any = None
    if o.voice is not None:  # the first node's voice, set before the session starts
        port.voice = VoiceControl(o.voice, snap.definition.flow, session)
        port.voice.apply(agent, controller.node)
        asked = snap.definition.flow.voice
        if room is not None and asked is not None:
            room_options = o.voice.room_options(asked.noise_cancellation)
    controller.bind(port)
    empty_speech = EmptySpeechWatch(controller, agent)
    run = AgentRun(
        call,
        snap,
        controller,
        session,
        agent,
        outbox,
        resumed,
        talk=PushToTalk(session, controller, port),
        empty_speech=empty_speech,
    )
    outbox.on_error = run.outbox_failed
    controller.on_stopped = run.leave
    run.supervisors = SupervisorFeed(
        controller,
        o.supervisor_poll_s,
        nudges=Nudges(o.nudges, call_id) if o.nudges is not None else None,
        backstop_s=o.supervisor_backstop_s,
    )
    run.supervisor_voice = SupervisorVoice(controller, session, agent, run.supervisors.poll)

    def on_item(ev: ConversationItemAddedEvent) -> None:
        item = ev.item
        if isinstance(item, lk_llm.ChatMessage) and item.role in ("user", "assistant"):
            if item.role == "user" and (item.text_content or "").strip():
                empty_speech.user_turn()
            controller.on_turn(item.role, item.text_content or "", interrupted=item.interrupted)
            if item.role == "user":
                agent.user_item_added(item.id)  # a retrieval for it may go now (flow_agent.py)

    away = [0]  # which silence this is: a task prompting for an earlier one stops

    def on_user_state(ev: UserStateChangedEvent) -> None:
        empty_speech.user_state(ev.new_state)
        away[0] += 1
        if ev.new_state == "away" and not controller.ended:
            run.tasks.append(asyncio.get_running_loop().create_task(_while_away(run, away, away[0])))

    def on_barge_in(ev: UserStateChangedEvent) -> None:
        if ev.new_state == "speaking":
            controller.on_barge_in()

    session.on("conversation_item_added", on_item)
    session.on("user_state_changed", on_barge_in)
    if idle_from_session:
        session.on("user_state_changed", on_user_state)
    if room is None:
        await session.start(agent)
    elif room_options is not None:
        await session.start(agent, room=room, room_options=room_options)
    else:
        await session.start(agent, room=room)
    loop = asyncio.get_running_loop()
    if heartbeat_s > 0:
        every = min(heartbeat_s, HEARTBEAT_CHECK_S)
        run.tasks.append(loop.create_task(_heartbeat(run, every, lease)))
    if controller.jobs is not None:
        run.tasks.append(loop.create_task(controller.jobs.run()))
    if o.supervisor_poll_s > 0:
        run.tasks.append(loop.create_task(run.supervisors.run()))
    if own_max_duration:
        settings = snap.definition.flow.settings
        started = snap.state.started_at or clock()
        limit = started + settings.max_duration_s - MAX_DURATION_MARGIN_S
        run.tasks.append(loop.create_task(_max_duration(controller, limit, clock)))
    controller.values.start()  # extractions still running reach this engine (agents/values.py)
    if snap.ended:
        await controller.apply(unsaid_last_turn(controller, snap))
        await port.end_call(snap.state.end_reason or "completed")
    elif resumed:  # the context is rebuilt above as the node's strategy left it: no new reset
        shown = controller.current_tools()  # the node's prompt and tools only: nothing is said again
        if shown is not None:
            await controller.apply([shown.model_copy(update={"context": "append"})])
        last = snap.transcript_tail[-1]
        if snap.state.takeover:  # a supervisor has the call: this agent starts paused, silent
            await port.pause()
        elif answer_pending and last.role == "user":
            # The caller spoke and the dead agent never answered: answer now, not after a silence.
            port.reply(None, agent.allow_interruptions is not False)
    elif greet:  # not greeting: who answered is not known yet (answering-machine detection)
        await controller.apply(controller.start_effects())
    log.info(
        "agent %s attached (resumed=%s)",
        agent_id,
        resumed,
        extra={"event": "agent_attached", "agent_id": agent_id, "resumed": resumed},
    )
    return run


async def _heartbeat(run: AgentRun, every: float, lease: AgentLease | None) -> None:
    """A sign of life each round (the outbox skips it while another send went out within the
    heartbeat interval), and this agent's check that the call is still its own: the lease
    renewed, or without one the workflow asked for its current epoch (a query: no history),
    so a replaced agent leaves within one round (``HEARTBEAT_CHECK_S`` at most) even when it
    does nothing."""
    controller = run.controller
    while not controller.ended and not controller.dead:
        controller.heartbeat()
        if lease is not None:
            if not await controller.current("heartbeat"):
                return
        elif controller.epoch is not None:
            with contextlib.suppress(Exception):  # the workflow away: the next beat asks again
                current = await run.call.agent_epoch()
                if current != controller.epoch:
                    controller.stop(f"the call's agent is epoch {current} now, not {controller.epoch}")
                    return
        await asyncio.sleep(every)


async def _while_away(run: AgentRun, away: list[int], silence: int) -> None:
    """The idle rule on a live session. livekit reports ``away`` once per silence (after
    ``user_away_timeout``) and the caller stays away until they speak, so the later prompts
    of the same silence, and the goodbye of the rule of three, are timed here, each one
    ``idle.timeout_s`` after the previous prompt was said (livekit's own recipe for an absent
    user). A caller who speaks ends this silence: its task stops."""
    controller = run.controller
    every = controller.engine.definition.flow.settings.idle.timeout_s
    while away[0] == silence and not controller.ended and not controller.dead:
        await controller.on_idle()
        with contextlib.suppress(Exception):  # a closing session: nothing more is said
            await run.session.wait_for_idle()
        await asyncio.sleep(every)
        if run.session.user_state != "away":
            return


async def _max_duration(controller: FlowController, limit: float, clock: Callable[[], float]) -> None:
    """The agent's own time limit (``limit``, an instant), later by the supervisors'
    takeovers so far and never reached while one lasts: the flow's timers pause."""
    while True:
        left = limit + controller.paused_s - clock()
        if left <= 0 and not controller.state.takeover:
            break
        await asyncio.sleep(max(left, 1.0) if controller.state.takeover else max(0.0, left))
    await controller.on_max_duration()
