"""The LiveKit agent worker: one job per call, read top to bottom.

A job's metadata carries ``{"call_id": ...}`` for an outbound call (the workflow exists;
we attach) or after a crash (``"resume": true``; we attach and carry on). An inbound SIP
call arrives from a dispatch rule with no call id: we start the workflow ourselves
(update-with-start), naming it after the room and choosing the flow from the dispatch
metadata or the called number. The room keeps LiveKit's name (``CallInput.room``: where
transfers find the caller); the call id is derived from it (``call_id_for_room``).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import sys
import tempfile
import uuid
from typing import Any

from livekit import rtc
from livekit.agents import AgentServer, AgentSession, JobContext, JobProcess

from ringflow.activities.flow_canaries import resolve_call
from ringflow.activities.flow_store import is_file_ref, load_definition, version_source
from ringflow.agents.amd import detect_machine
from ringflow.agents.dtmf import KeyCollector
from ringflow.agents.lease import AgentLease, LeaseHeld
from ringflow.agents.listen import watch_talk
from ringflow.agents.livekit_api import call_id_for_room, close_room, parse_job_metadata
from ringflow.agents.livekit_device import watch_device
from ringflow.agents.livekit_sip import ANNOUNCED
from ringflow.agents.runner import attach_agent
from ringflow.agents.supervisor_voice import watch_supervisors
from ringflow.agents.voice_providers import ProviderStack
from ringflow.callflow.loader import load_flow
from ringflow.codec import CodecKeyError, require_keyring
from ringflow.contract.journey import JoinRequest
from ringflow.contract.updates import Snapshot
from ringflow.logs import install_record_factory
from ringflow.servers.agent_probes import LOAD_THRESHOLD, AgentProbes, CallsLoad
from ringflow.settings import Settings, get_settings
from ringflow.temporal_setup import connect
from ringflow.workflows.client import start_or_attach
from ringflow.workflows.journey_client import join_journey

log = logging.getLogger(__name__)
SIP_CALLER = "sip.phoneNumber"
SIP_CALLED = "sip.trunkPhoneNumber"
AEC_WARMUP_S = 3.0  # livekit-agents' default warm-up (AgentSession(aec_warmup_duration=...))


_OPENAI_CLIENTS: dict[tuple[str | None, str | None], tuple[asyncio.AbstractEventLoop | None, Any]] = {}


def shared_openai_client(base_url: str | None, api_key: str | None) -> Any:
    """One HTTP client per process and event loop: building one (its TLS context) costs
    ~50 ms, which a resuming agent would otherwise pay on every attach while the caller
    waits. Its pooled connections belong to the loop that opened them, so a process that
    runs a second loop (``asyncio.run`` again: a CLI command run twice in one process, a
    test) gets a client of its own instead of one whose connections fail with "Event loop
    is closed"."""
    import openai

    try:
        loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        loop = None
    key = (base_url, api_key)
    cached = _OPENAI_CLIENTS.get(key)
    if cached is None or cached[0] is not loop:
        cached = (loop, openai.AsyncClient(base_url=base_url, api_key=api_key or "unset"))
        _OPENAI_CLIENTS[key] = cached
    return cached[1]


def prewarm(proc: JobProcess) -> None:
    """LiveKit's prewarm, run once per job process before any job: import the plugins and
    load the VAD and the end-of-turn model here, so a call (above all a resuming one, while
    the caller waits) does not pay for them: importing the OpenAI plugin alone costs
    0.7-1.1 s, and the end-of-turn model's first load holds the GIL for ~0.4 s, which inside
    a call stalls the audio of every call in the process. Then the heap is frozen: what
    prewarm loaded lives as long as the process, and full collections walking it (120-330 ms)
    were seen mid-call."""
    settings = get_settings()
    from livekit.plugins import openai as _lk_openai  # noqa: F401  (the import is the point)

    if settings.vad == "silero":
        from livekit.plugins import silero

        proc.userdata["vad"] = silero.VAD.load()
    load_turn_detector()
    gc.collect()
    gc.freeze()


def load_turn_detector() -> None:
    """livekit's end-of-turn model (``livekit-local-inference``: its weights are in the wheel,
    nothing is downloaded) and its VAD, loaded once; later sessions construct them for free."""
    import livekit.local_inference as local_inference

    local_inference.init_vad()
    local_inference.init_eot()


def aec_warmup_s(phone: bool) -> float | None:
    """livekit's echo-cancellation warm-up, during which the caller cannot interrupt the
    agent's first speech (their words are dropped): 3 s by default, livekit skips it only for
    outbound SIP. A phone call has no loudspeaker feeding its microphone, so any phone call,
    inbound or outbound, has none; a browser or app call keeps livekit's default."""
    return None if phone else AEC_WARMUP_S


def is_phone_call(room: rtc.Room) -> bool:
    """A SIP participant is on the line (the callee we dialed or an inbound caller)."""
    return any(p.kind == rtc.ParticipantKind.PARTICIPANT_KIND_SIP for p in room.remote_participants.values())


def real_llm_of(settings: Settings, **options: Any) -> Any:
    """The model the settings name, on the OpenAI-compatible server they name (``options``:
    the plugin's, e.g. a flow voice's ``temperature``)."""
    from livekit.plugins import openai as lk_openai

    key = settings.openai_api_key.get_secret_value() if settings.openai_api_key else None
    return lk_openai.LLM(
        model=settings.llm_model, client=shared_openai_client(settings.openai_base_url, key), **options
    )


def make_session(settings: Settings, snap: Snapshot, vad: Any = None, *, phone: bool = False) -> AgentSession:
    """STT, LLM, TTS and VAD chosen by settings; the LLM is any OpenAI-compatible server.
    ``vad`` is the process's prewarmed one; without it (no prewarm ran) it is loaded here.
    ``phone``: the caller is on a phone line (no echo-cancellation warm-up)."""
    from livekit.plugins import openai as lk_openai

    llm = real_llm_of(settings)
    stt: Any = lk_openai.STT() if settings.stt == "openai" else settings.stt
    tts: Any = lk_openai.TTS() if settings.tts == "openai" else settings.tts
    if vad is None and settings.vad == "silero":
        from livekit.plugins import silero

        vad = silero.VAD.load()
    idle = snap.definition.flow.settings.idle.timeout_s
    return AgentSession(
        llm=llm, stt=stt, tts=tts, vad=vad, user_away_timeout=idle, aec_warmup_duration=aec_warmup_s(phone)
    )


async def entrypoint(ctx: JobContext) -> None:
    install_record_factory()  # this job's lines (livekit's JSON handler) carry the call's id and node
    settings = get_settings()
    info = parse_job_metadata(ctx.job.metadata)
    if info.announce is not None:  # a warm transfer's consult room: brief the person, nothing else
        await announce(ctx, settings, info.announce)
        return
    client = await connect(settings.temporal_address, settings.temporal_namespace)
    await ctx.connect()
    # The agent's participant identity: the webhook receiver matches a participant_left to it
    agent_id = ctx.room.local_participant.identity or f"agent-{uuid.uuid4().hex[:8]}"
    if info.wait_for:  # a dialed call: attach (and greet) once the callee has picked up
        callee = await ctx.wait_for_participant(identity=info.wait_for)
        if not await picked_up(ctx.room, callee):
            ctx.shutdown("the callee did not answer")  # the workflow ends the call with the outcome
            return
    call_id = info.call_id
    if call_id is None:
        caller = await ctx.wait_for_participant()
        call_id = await start_inbound(
            client, settings, ctx.room.name, caller, info.flow, agent_id, info.variables
        )

    async def hang_up() -> None:
        await close_room(
            ctx.room.name,
            url=settings.livekit_url,
            api_key=settings.livekit_api_key,
            api_secret=settings.livekit_api_secret.get_secret_value()
            if settings.livekit_api_secret
            else None,
        )

    lease = journal = None
    if settings.redis_url:
        from redis.asyncio import Redis

        journal = Redis.from_url(settings.redis_url, socket_timeout=2, socket_connect_timeout=2)
        lease = AgentLease(journal, ttl_s=settings.call_agent_timeout_s)
    key = settings.openai_api_key.get_secret_value() if settings.openai_api_key else None
    voice = ProviderStack(
        settings.llm_model, client=shared_openai_client(settings.openai_base_url, key), room=ctx.room
    )
    try:
        run = await attach_agent(
            client,
            call_id,
            agent_id,
            room=ctx.room,
            close_room=hang_up,
            lease=lease,
            journal=journal,
            heartbeat_s=settings.heartbeat_s,
            supervisor_poll_s=settings.supervisor_poll_s,
            nudges=journal,  # supervisors' commands wake the supervision read (Redis pub/sub)
            supervisor_backstop_s=settings.supervisor_backstop_s,
            session_factory=lambda snap: make_session(
                settings, snap, ctx.proc.userdata.get("vad"), phone=is_phone_call(ctx.room)
            ),
            voice=voice,  # the flow's voice: settings, node by node (agents/voice.py)
        )
    except LeaseHeld as exc:  # a duplicate dispatch: the call already has a live agent
        log.warning("not joining: %s", exc)
        ctx.shutdown("another agent holds the call")
        return
    finished = asyncio.Event()
    keys = KeyCollector(run.controller)

    @ctx.room.on("sip_dtmf_received")
    def _key(ev: rtc.SipDTMF) -> None:  # the caller pressed a key
        asyncio.get_running_loop().create_task(keys.press(ev.digit))

    run.controller.port.dtmf_sender = lambda digits: press_keys(ctx.room, digits)  # type: ignore[union-attr]
    # job groups' envelopes to the room (topic ringflow.jobs), for a client to show
    run.controller.port.data_sender = lambda topic, payload: ctx.room.local_participant.publish_data(  # type: ignore[union-attr]
        payload, reliable=True, topic=topic
    )
    watch_device(ctx.room, run.controller)  # tools the caller's device offers (device_tools nodes)
    if run.supervisor_voice is not None:  # a supervisor's speech during a takeover, transcribed
        watch_supervisors(ctx.room, run.supervisor_voice)
    if run.talk is not None:
        watch_talk(ctx.room, run.talk)  # push-to-talk from the client on `listen: manual` nodes
    if info.wait_for and not run.resumed:  # a call we dialed: who (or what) picked up?
        run.tasks.append(asyncio.get_running_loop().create_task(detect_machine(run)))

    @ctx.room.on("participant_disconnected")
    def _gone(p: rtc.RemoteParticipant) -> None:
        if p.kind == rtc.ParticipantKind.PARTICIPANT_KIND_SIP or not ctx.room.remote_participants:
            asyncio.get_running_loop().create_task(run.controller.on_caller_hangup()).add_done_callback(
                lambda _: finished.set()
            )

    while not finished.is_set() and not run.left.is_set():
        ending = run.controller.ending
        if ending is not None:
            await ending
            break
        waits = {asyncio.ensure_future(finished.wait()), asyncio.ensure_future(run.left.wait())}
        await asyncio.wait(waits, timeout=1.0, return_when=asyncio.FIRST_COMPLETED)
        for w in waits:
            w.cancel()
    if run.left.is_set():  # another agent has the call: leave the room, never close it
        ctx.shutdown(f"replaced by another agent: {run.left_why}")
        return
    await run.close()
    await voice.aclose()
    ctx.shutdown("call ended")


async def picked_up(room: rtc.Room, callee: rtc.RemoteParticipant) -> bool:
    """LiveKit adds the callee to the room when the phone starts ringing (``sip.callStatus``
    ``dialing``/``ringing``) and marks it ``active`` on the answer: greeting earlier would
    speak into the ringing tone. False when the callee left instead (no answer, busy)."""
    if callee.attributes.get("sip.callStatus", "active") == "active":
        return True
    loop = asyncio.get_running_loop()
    outcome: asyncio.Future[bool] = loop.create_future()

    def changed(_changed: dict[str, str], p: rtc.Participant) -> None:
        if (
            p.identity == callee.identity
            and p.attributes.get("sip.callStatus") == "active"
            and not outcome.done()
        ):
            outcome.set_result(True)

    def left(p: rtc.RemoteParticipant) -> None:
        if p.identity == callee.identity and not outcome.done():
            outcome.set_result(False)

    room.on("participant_attributes_changed", changed)
    room.on("participant_disconnected", left)
    try:
        return await outcome
    finally:
        room.off("participant_attributes_changed", changed)
        room.off("participant_disconnected", left)


async def announce(ctx: JobContext, settings: Settings, text: str) -> None:
    """The announcer of a warm transfer (``agents/livekit_sip.py``): in the consult room, tell
    the person who is calling and why, then mark it done (``ringflow.announced``); the
    transfer moves the person to the caller and closes this room, which ends the job."""
    from livekit.agents import Agent
    from livekit.plugins import openai as lk_openai

    await ctx.connect()
    await ctx.wait_for_participant()
    tts: Any = lk_openai.TTS() if settings.tts == "openai" else settings.tts
    session: AgentSession[None] = AgentSession(tts=tts)
    await session.start(Agent(instructions="You only announce a transferred caller."), room=ctx.room)
    await session.say(text, allow_interruptions=False)
    await session.wait_for_idle()
    await ctx.room.local_participant.set_attributes({ANNOUNCED: "done"})


DTMF_CODES = {**{str(d): d for d in range(10)}, "*": 10, "#": 11, "A": 12, "B": 13, "C": 14, "D": 15}


async def press_keys(room: rtc.Room, digits: str) -> None:
    """The bot presses keys on the call (LiveKit sends them as SIP DTMF to the line)."""
    for digit in digits.upper():
        if digit in DTMF_CODES:
            await room.local_participant.publish_dtmf(code=DTMF_CODES[digit], digit=digit)


async def start_inbound(
    client: Any,
    settings: Settings,
    room: str,
    caller: rtc.RemoteParticipant,
    flow: str | None,
    agent_id: str,
    variables: dict[str, Any],
) -> str:
    called = caller.attributes.get(SIP_CALLED)
    flow_path = flow or (settings.inbound_flows.get(called) if called else None) or settings.inbound_flow
    if not flow_path:
        raise RuntimeError(
            f"inbound call in room {room}: no flow for called number; set "
            "RINGFLOW_INBOUND_FLOW or RINGFLOW_INBOUND_FLOWS"
        )
    ref: dict[str, Any] = {}
    call_id = call_id_for_room(room)
    if is_file_ref(flow_path):
        # a file on the agent: the call carries its definition (its subflows' nodes too)
        definition = load_flow(flow_path, versions=version_source(settings.database_url))
    else:  # NAME, NAME@VERSION, NAME@CHANNEL: resolved now (a canary splits by call id), kept
        found = (await asyncio.to_thread(resolve_call, settings.database_url, flow_path, call_id)).version
        definition = await asyncio.to_thread(
            load_definition, settings.database_url, found.name, found.version
        )
        ref = {"flow_ref": found.ref}
    caller_number = caller.attributes.get(SIP_CALLER)
    if definition.flow.journey is not None:  # a callback joins the person's open journey
        await join_journey(
            client,
            definition.flow.flow,
            caller_number,
            JoinRequest(
                call_id=call_id,
                room=room,
                caller_number=caller_number,
                called_number=called,
                agent_timeout_s=settings.call_agent_timeout_s,
            ),
            settings.journey_secret,
        )
    handle, _ = await start_or_attach(
        client,
        definition,
        task_queue=settings.task_queue,
        call_id=call_id,
        agent_id=agent_id,
        variables=variables,
        direction="inbound",
        room=room,
        agent_timeout_s=settings.call_agent_timeout_s,
        caller_number=caller_number,
        called_number=called,
        **ref,
    )
    return handle.call_id


def build_server(settings: Settings) -> AgentServer:
    server = AgentServer(
        ws_url=settings.livekit_url,
        api_key=settings.livekit_api_key,
        api_secret=settings.livekit_api_secret.get_secret_value() if settings.livekit_api_secret else None,
        drain_timeout=settings.agent_drain_timeout_s,
        # Load is calls, not the node's CPU: LiveKit stops offering calls at
        # RINGFLOW_AGENT_MAX_CALLS, the count the autoscaler scales on (agent_probes.py).
        load_fnc=CallsLoad(settings.agent_max_calls),
        load_threshold=LOAD_THRESHOLD,
        # LiveKit's own health server moves to a port of its choosing; the probes on
        # RINGFLOW_AGENT_HEALTH_PORT are Ringflow's (/readyz: registered with LiveKit).
        port=0,
        # LiveKit's metrics server, which also serves Ringflow's (agents.metrics),
        # collected from every job process (multiprocess mode)
        prometheus_port=settings.agent_metrics_port or None,
        prometheus_multiproc_dir=os.environ.get("PROMETHEUS_MULTIPROC_DIR")
        or tempfile.mkdtemp(prefix="ringflow-agent-metrics-")
        if settings.agent_metrics_port
        else None,
    )
    server.setup_fnc = prewarm
    server.rtc_session(entrypoint, agent_name=settings.agent_name)
    if settings.agent_health_port:
        AgentProbes(server, "", settings.agent_health_port).start_with_server()
    return server


def run(settings: Settings | None = None) -> None:
    """``ringflow agent``: the worker in headless ``start`` mode, explicit dispatch only."""
    from livekit.agents import cli

    settings = settings or get_settings()
    needed = (
        ("LIVEKIT_URL", settings.livekit_url),
        ("LIVEKIT_API_KEY", settings.livekit_api_key),
        ("LIVEKIT_API_SECRET", settings.livekit_api_secret),
    )
    missing = [name for name, value in needed if not value]
    if missing:
        raise SystemExit(f"error: ringflow agent needs {', '.join(missing)}")
    try:
        require_keyring(settings)  # the agent's signals carry the transcript: never in clear by accident
    except CodecKeyError as err:
        raise SystemExit(f"error: {err}") from None
    level = {"WARNING": "WARN"}.get(settings.log_level.upper(), settings.log_level.upper())
    sys.argv = [sys.argv[0], "start", "--log-level", level]  # start mode logs JSON lines
    cli.run_app(build_server(settings))
