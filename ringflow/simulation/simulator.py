"""``ringflow call simulate``: a whole call with no audio, no API keys, no LiveKit server.

Each script runs as a real call: a real ``CallWorkflow`` on a Temporal server (an
embedded one when no address is given), real activities in a worker of this process,
and the real agent code in livekit-agents' text mode (an ``AgentSession`` with no room
and no STT/TTS). The LLM is reached over HTTP by the same OpenAI client code as in
production, at a scripted endpoint that plays the script's ``llm:`` and ``extract:``
entries. Silence is simulated without sleeping: the simulator calls the agent's idle
logic once per ``idle.timeout_s`` of scripted silence.

HTTP entries are guarded as on a worker (``RINGFLOW_HTTP_ALLOW_PRIVATE``): a script's
``allow_private`` lets its call reach exactly the private addresses it lists, and its
result says so, since a worker would refuse them.

``kill_at=N`` kills the agent during turn N (at the first kill point that turn
reaches: a transition applied but not yet signalled, a node function, a transcript
turn), attaches a new agent, and replays turn N: what the workflow already has is
recognised by its event ids and not applied twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from livekit.agents import Agent, AgentSession
from livekit.plugins import openai as lk_openai
from pydantic import BaseModel, PrivateAttr
from temporalio.client import Client
from temporalio.converter import PayloadCodec
from temporalio.runtime import Runtime

from ringflow.activities.analysis import SCHEMA_NAME as ANALYSIS_SCHEMA
from ringflow.activities.dispatch import Dispatcher
from ringflow.activities.flow_store import publish_file, version_source
from ringflow.activities.handler_run import parse_flow_dirs
from ringflow.activities.http_tool import PRIVATE_ALLOWED
from ringflow.activities.netguard import allowed_networks
from ringflow.activities.telephony import Telephony
from ringflow.agents.amd import report_verdict
from ringflow.agents.dtmf import KeyCollector
from ringflow.agents.hooks import RefusedHook
from ringflow.agents.livekit_api import call_id_for_room
from ringflow.agents.runner import AgentRun, attach_agent
from ringflow.callflow.errors import FlowError
from ringflow.callflow.journey import JourneyStart
from ringflow.callflow.loader import load_flow, validate_file
from ringflow.callflow.subflow_handlers import module_keys
from ringflow.callflow.voice import LlmChoice
from ringflow.codec import ephemeral_codec
from ringflow.contract.updates import Snapshot
from ringflow.devstack import DevStack, free_port
from ringflow.servers.agent import real_llm_of, shared_openai_client
from ringflow.settings import Settings, get_settings
from ringflow.simulation.device import ScriptedDeviceLink
from ringflow.simulation.jobs import ScriptedJobs, after_turn
from ringflow.simulation.kill_points import Killed, kill_hooks
from ringflow.simulation.knowledge import SIM_DATABASES, ingest_for_script
from ringflow.simulation.local_dispatch import LOCAL
from ringflow.simulation.phone import LINES, PhoneLine, answered, inbound_room, phone_line
from ringflow.simulation.scripted_llm import LANE_HEADER, ScriptedLLM
from ringflow.simulation.scripts import ScriptError, check, kill_turn_problem, load_script
from ringflow.simulation.supervisor import play_supervisor
from ringflow.simulation.voice_stack import SimulatedStack, production_voice
from ringflow.temporal_setup import connect
from ringflow.workflows.client import CallHandle, start_call, workflow_id
from ringflow.workflows.worker import build_worker

log = logging.getLogger(__name__)

TURN_TIMEOUT_S = 60.0
# A killed simulated agent is reported at once, as production learns it: the fake LiveKit's
# participant_left webhook reaches the workflow through the real receiver (phone_line), and
# the workflow replaces the agent then. Silence is only the backstop, as in production. It
# was the only path once, at 1 s: on a loaded machine (load 10 on 2 cores) a healthy agent's
# process was starved of its heartbeats for over a second now and then (3 runs in 82 of
# bench/sim_under_load.py), and the workflow replaced an agent that was still talking.
DISPATCH_AGENT_TIMEOUT_S = 10.0
SIMULATED_AMD = "simulated: the script's dial answer"


class SimulationResult(BaseModel):
    script: str
    call_id: str = ""
    workflow_id: str = ""
    path: list[str] = []
    end_reason: str | None = None
    disposition: str | None = None
    variables: dict[str, Any] = {}
    state: dict[str, Any] = {}
    transitions: int = 0
    ok: bool = False
    failures: list[str] = []
    transcript: list[dict[str, Any]] = []  # {role, node, text}
    # what was refused, and why: {what, arguments, why} (a function call the agent or the
    # workflow refused, or an event the workflow rejected: then ``arguments`` is None)
    rejected: list[dict[str, Any]] = []
    error: str | None = None  # the script could not run to its end (ok is False)
    kills: int = 0
    sent_dtmf: list[str] = []  # keys the bot pressed (send_dtmf entries), across agents
    device_calls: list[dict[str, Any]] = []  # tools/call requests the script's device got, across agents
    transfer: dict[str, str] | None = None  # the transfer LiveKit was asked for: {to, mode}
    recording: dict[str, Any] | None = None  # the call's recording: {id, status, location, duration_s}
    analysis: dict[str, Any] | None = None  # the post-call analysis: {summary, success, sentiment, fields}
    # the script's allow_private: the private addresses HTTP entries were let through to here
    allow_private: list[str] = []
    # audio (``--audio``): each turn as the caller lived it (ringflow/simulation/audio/player.py)
    timings: list[dict[str, Any]] = []
    # audio: the offline stack that ran, and what production would have used (the settings');
    # a flow with ``voice:`` settings: also ``by_node``, what they name on each node it went through
    voice: dict[str, Any] | None = None
    # supervisor turns after which the agent's and the workflow's engines held other states
    diverged: list[str] = []
    _voiced: Any = PrivateAttr(None)  # the flow, when it has voice settings


def flows_dir_with(configured: str | None, scripts: list[Path]) -> str:
    """The worker's flow directories plus the folders of the flows these scripts play: a
    command that runs its own worker for scripts it was handed trusts their flows' handlers,
    as ``flow validate`` does."""
    dirs = [str(d) for d in parse_flow_dirs(configured)]
    for path in scripts:
        try:
            flow = load_script(path)[1]
        except Exception:  # not a script (run_script says why); its flow is not trusted
            continue
        dirs.append(str(flow.parent.resolve()))
        dirs += [str((flow.parent / rel).parent.resolve()) for rel in used_files(flow)]
    return os.pathsep.join(dict.fromkeys(dirs))


def used_files(flow: Path) -> list[str]:
    """The files of the used flows with handlers modules a flow file's subflows run, relative
    to its folder (read without importing a handler: none is trusted yet); none when the
    flow is not valid (playing it says why)."""
    definition = validate_file(flow, load_handlers=False).definition
    if definition is None:
        return []
    return [rel for _, rel in module_keys(definition).values() if rel is not None]


@asynccontextmanager
async def environment(
    address: str | None,
    data_dir: Path | None = None,
    runtime: Runtime | None = None,
    flows_dir: str | None = None,
    *,
    dispatcher: Dispatcher | None = None,
    telephony: Telephony | None = None,
    codec: PayloadCodec | None = None,
) -> AsyncIterator[tuple[Client, str, ScriptedLLM, DevStack | None]]:
    """A Temporal client (embedded server if no address), a worker of our own, a scripted LLM.
    The worker dispatches agents through the local dispatcher and dials through the playing
    script's phone line unless ``dispatcher`` or ``telephony`` replace them (a benchmark's
    LiveKit fake)."""
    stack: DevStack | None = None
    tmp = None
    if address is None:
        tmp = tempfile.TemporaryDirectory(prefix="ringflow-sim-")
        stack = DevStack(port=free_port(), ui_port=free_port(), data_dir=data_dir or Path(tmp.name))
        await stack.start()
        address = stack.address
        codec = codec or ephemeral_codec(get_settings())  # the server dies with us: so does its key
    llm = ScriptedLLM()
    base_url = await llm.start()
    # A task of its own: livekit-agents leaves its session's span attached to the context
    # that started the session, and every call started after it here would be traced under it.
    await asyncio.create_task(warm_agent(llm))
    db_dir = tempfile.TemporaryDirectory(prefix="ringflow-sim-db-")
    try:
        # a metrics runtime exports its worker's metrics; codec: the dev stack's (its demo call),
        # the embedded server's own, else the configured keys (a missing one: CodecKeyError)
        client = await connect(address, runtime=runtime, codec=codec)
        task_queue = f"simulate-{uuid.uuid4().hex[:8]}"
        settings = Settings(
            database_url=f"sqlite:///{db_dir.name}/calls.db",
            # as a worker does: a script's allow_private lets exactly its addresses through
            http_allow_private=get_settings().http_allow_private,
            flows_dir=flows_dir or get_settings().flows_dir,
            openai_base_url=base_url,  # the extraction activity runs in our worker
            openai_api_key="scripted",
        )
        # so do dispatch_agent (lost agents come back here) and the dial activities (each
        # script's phone line)
        SIM_DATABASES[task_queue] = settings.database_url  # scripts' knowledge bases go there
        try:
            async with build_worker(
                client,
                settings,
                task_queue=task_queue,
                dispatcher=dispatcher or LOCAL,
                telephony=telephony or LINES,
                recorder=LINES,
            ):
                yield client, task_queue, llm, stack
        finally:
            SIM_DATABASES.pop(task_queue, None)
    finally:
        await llm.stop()
        if stack is not None:
            stack.stop()
        db_dir.cleanup()
        if tmp is not None:
            tmp.cleanup()


async def warm_agent(llm: ScriptedLLM) -> None:
    """Start and close one agent session, and ask the scripted LLM through the agents'
    shared client as an agent and an extraction do, before any call. A process's first
    session loads livekit-agents' turn detector, and its first requests import the HTTP
    stack and resolve the OpenAI client's request types, synchronously on the event loop
    the worker and every simulated agent share: 2 s on an idle machine, 3-7 s on a loaded
    one. Paid by the first script's agent, after it had attached, it stopped that agent's
    heartbeats while its workflow timed its silence against the agent timeout, and a
    healthy agent was taken for lost. (``ringflow agent`` pays its imports in LiveKit's
    prewarm for the same reason.)"""
    client = shared_openai_client(llm.base_url, "scripted")
    session: AgentSession = AgentSession(
        llm=lk_openai.LLM(model="scripted", client=client), user_away_timeout=None
    )
    await session.start(Agent(instructions=""))
    await session.aclose()
    lane = "simulator-warm-up"
    ask = {"model": "scripted", "extra_headers": {LANE_HEADER: lane}}
    hello = [{"role": "user", "content": "warming up"}]
    stream = await client.chat.completions.create(messages=hello, stream=True, **ask)
    async for _ in stream:
        pass
    schema = {"type": "object", "properties": {}, "required": [], "additionalProperties": False}
    fmt = {"type": "json_schema", "json_schema": {"name": "warm_up", "strict": True, "schema": schema}}
    await client.chat.completions.create(messages=hello, response_format=fmt, **ask)
    llm.lanes.pop(lane, None)


class _Killer:
    """Kill hook: fires at the first kill point reached while armed (or only at ``point``)."""

    def __init__(self, point: str | None = None) -> None:
        self.point = point
        self.armed = False
        self.fired: str | None = None

    def __call__(self, point: str) -> None:
        if self.armed and self.fired is None and (self.point is None or point == self.point):
            self.fired = point
            raise Killed(point)


async def run_script(
    path: Path,
    client: Client,
    task_queue: str,
    llm: ScriptedLLM,
    *,
    kill_at: int | None = None,
    kill_point: str | None = None,
    real_llm: bool = False,
    resume: str = "attach",
    inbound: bool = False,
    journey: JourneyStart | None = None,
    publish_to: str | None = None,
    audio: bool = False,
) -> SimulationResult:
    """``inbound``: the caller of a script without ``dial:`` rings in through a dispatch rule,
    so LiveKit names the room (``sim_phone.inbound_room``) and the call id is derived from it,
    as ``ringflow agent`` does: the room differs from the call id.

    ``resume="dispatch"`` waits, after a kill, for the workflow to notice the silent agent
    and dispatch a new one (through the local dispatcher), as in production; ``"attach"``
    attaches the new agent at once (the kill tests, which exclude dispatch time). A script
    with ``dial:`` is placed as a phone call first (``ringflow/simulation/phone.py``).
    ``journey``: the call is a journey's (``CallInput.journey``): its node, state, context.
    ``publish_to`` (a database URL): the flow is published there first and the call names
    the version instead of carrying the definition (``ringflow/flow_codec.py``).

    ``audio``: the call runs on real audio (``ringflow/simulation/audio/``); ``kill_at`` then
    kills the agent halfway through the caller's line of that turn."""
    script, flow_path = load_script(path)
    if (problem := kill_turn_problem(script, kill_at)) is not None:
        raise ScriptError(f"{path}: {problem}")
    if audio and any(t.supervisor is not None for t in script.turns):
        raise ScriptError(f"{path}: 'supervisor' turns run in text mode (without --audio)")
    if audio and kill_at is not None and script.turns[kill_at].user is None:
        why = f"with --audio the kill is mid-utterance: turn {kill_at} has no 'user' line"
        raise ScriptError(f"{path}: --kill-agent-at {kill_at}: {why}")
    call_id = f"sim-{uuid.uuid4().hex[:10]}"
    room = inbound_room() if inbound and script.dial is None else None
    call_id = call_id_for_room(room) if room is not None else call_id
    refused: list[dict[str, Any]] = []
    await ingest_for_script(flow_path, task_queue)  # the flow's knowledge: simulation/knowledge.py
    jobs = ScriptedJobs(call_id, script.jobs)
    PRIVATE_ALLOWED[call_id] = allowed_networks(script.allow_private)
    try:
        async with phone_line(script.dial, script.transfer_answer, client) as line:
            jobs.open()  # the script's jobs: see ringflow/simulation/jobs.py
            result = await _run_script(
                path,
                script,
                flow_path,
                line,
                client,
                task_queue,
                llm,
                call_id,
                refused,
                room=room,
                kill_at=kill_at,
                kill_point=kill_point,
                real_llm=real_llm,
                resume=resume,
                jobs=jobs,
                journey=journey,
                publish_to=publish_to,
                audio=audio,
            )
            result.transfer = line.transferred()
            result.failures = check(script.expect, result.model_dump()) + result.diverged
            result.ok = not result.failures
    except Exception as exc:
        log.debug("script %s raised", path, exc_info=True)
        LOCAL.forget(call_id)
        result = SimulationResult(
            script=str(path), call_id=call_id, workflow_id=workflow_id(call_id), error=describe_error(exc)
        )
        with contextlib.suppress(Exception):  # a call left running would hold nothing but noise
            await client.get_workflow_handle(workflow_id(call_id)).terminate("the simulation failed")
    finally:
        jobs.close()
        PRIVATE_ALLOWED.pop(call_id, None)
    result.allow_private = script.allow_private
    result.rejected = refused + _not_offered(llm.lane(call_id)) + await _workflow_rejections(client, call_id)
    return result


def _refusal(what: str, arguments: dict[str, Any] | None, why: Any, node: str | None) -> dict[str, Any]:
    return {"what": what, "arguments": arguments, "why": str(why), "node": node}


def _recorder(refused: list[dict[str, Any]]) -> RefusedHook:
    """The agent's ``on_refused`` hook: each function call the agent refuses is noted (the
    LLM is told why, the script's author should be too)."""

    def on_refused(name: str, args: dict[str, Any], result: Any, node: str | None) -> None:
        why = result.get("error", result) if isinstance(result, dict) else result
        refused.append(_refusal(name, args, why, node))

    return on_refused


def _not_offered(lane: Any) -> list[dict[str, Any]]:
    """Calls the LLM made to functions its request did not offer (livekit refuses those
    before the agent sees them): read from what the scripted endpoint answered."""
    out: list[dict[str, Any]] = []
    for rec in lane.of_kind("chat"):
        msg = ((rec.response or {}).get("choices") or [{}])[0].get("message") or {}
        for call in msg.get("tool_calls") or []:
            fn = call.get("function") or {}
            if fn.get("name") not in rec.tool_names:
                try:
                    args = json.loads(fn.get("arguments") or "{}")
                except ValueError:
                    args = {"raw": fn.get("arguments")}
                offered = ", ".join(rec.tool_names) or "none"
                out.append(
                    _refusal(
                        str(fn.get("name")), args, f"not a function of this node (offered: {offered})", None
                    )
                )
    return out


async def _workflow_rejections(client: Client, call_id: str) -> list[dict[str, Any]]:
    """Events the workflow rejected (its state query: the worker is still up)."""
    try:
        state = await asyncio.wait_for(CallHandle(client, call_id).state(), 10)
    except Exception:  # a call that never started has nothing to say
        return []
    return [_refusal(r.event_id or "event", None, r.reason, None) for r in state.rejected]


async def _run_script(
    path: Path,
    script: Any,
    flow_path: Path,
    line: PhoneLine,
    client: Client,
    task_queue: str,
    llm: ScriptedLLM,
    call_id: str,
    refused: list[dict[str, Any]],
    *,
    room: str | None,
    kill_at: int | None,
    kill_point: str | None,
    real_llm: bool,
    resume: str,
    jobs: ScriptedJobs,
    journey: JourneyStart | None = None,
    publish_to: str | None = None,
    audio: bool = False,
) -> SimulationResult:
    definition = load_flow(flow_path, versions=version_source(publish_to or get_settings().database_url))
    ref: dict[str, Any] = {}
    if publish_to is not None:
        definition, version = publish_file(publish_to, flow_path)
        ref = {"flow_ref": version.ref}
    idle_s = definition.flow.settings.idle.timeout_s
    lines: list[Any] = []  # audio: each agent's line, the current one last
    phrases = [t.user for t in script.turns if t.user]
    voice: Any = None
    if audio:  # every line spoken (or found in the cache) before the call: no gap mid-call
        from ringflow.simulation.audio.caller_voice import BABBLE
        from ringflow.simulation.audio.stack import caller_voice

        voice = caller_voice(get_settings().data_dir)
        lines_and_noise = [*phrases, BABBLE]
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, lambda: [voice.speak(p) for p in lines_and_noise])
    dial = line.dial
    lane = llm.lane(call_id)
    for node, values in script.extract.items():
        lane.set_extract(node, values)
    if script.analysis:
        lane.set_extract(ANALYSIS_SCHEMA, script.analysis)
    lane.extract_delay = dict(script.extract_delay_s)
    dispatches = LOCAL.watch(call_id) if resume == "dispatch" else None
    handle = await start_call(
        client,
        definition,
        task_queue=task_queue,
        call_id=call_id,
        variables=script.variables,
        agent_timeout_s=DISPATCH_AGENT_TIMEOUT_S if dispatches else 15.0,
        **({"dial": dial} if dial is not None else {}),
        **({"room": room} if room is not None else {}),
        **({"journey": journey} if journey is not None else {}),
        **ref,
    )
    room = room or call_id
    killer = _Killer(kill_point)
    result = SimulationResult(script=str(path), call_id=call_id, workflow_id=workflow_id(call_id))
    device = ScriptedDeviceLink(script.device) if script.device is not None else None
    if device is not None:
        result.device_calls = device.calls  # the same list, filled as the call goes
    if dial is None:
        line.connect(room)
    if dial is not None and not await answered(handle, TURN_TIMEOUT_S):  # nobody to talk to
        LOCAL.forget(call_id)
        return _finish(result, script, await asyncio.wait_for(handle.handle.result(), TURN_TIMEOUT_S))

    def llm_of(choice: LlmChoice | None = None) -> Any:
        """The call's model: the scripted one (or the settings' real one), with a flow
        voice's temperature (and, real, its model)."""
        options: dict[str, Any] = {}
        if choice is not None and choice.temperature is not None:
            options["temperature"] = choice.temperature
        if real_llm:
            settings = get_settings()
            if choice is not None and choice.model:
                settings = settings.model_copy(update={"llm_model": choice.model})
            return real_llm_of(settings, **options)
        options["extra_headers"] = {"X-Ringflow-Script": call_id}
        return lk_openai.LLM(
            model="scripted", client=shared_openai_client(llm.base_url, "scripted"), **options
        )

    flow = definition.flow
    voiced = flow.voice is not None or any(n.voice is not None for n in flow.nodes.values())

    def room_of(session: AgentSession) -> Any:
        """The simulated room of the session's line: background sounds play to its caller."""
        return next(ln.room for ln in lines if ln.session is session)

    stack = (
        SimulatedStack(llm_of, audio=audio, phrases=phrases, room_of=room_of if audio else None)
        if voiced
        else None
    )

    def session_factory(snap: Snapshot) -> AgentSession:
        model = llm_of()
        if audio:
            from ringflow.simulation.audio.stack import audio_session

            session, audio_line = audio_session(model, phrases=phrases, idle_s=idle_s)
            lines.append(audio_line)
            return session
        return AgentSession(llm=model, user_away_timeout=None)

    async def new_agent(greet: bool = True) -> AgentRun:
        agent_id = f"sim-agent-{uuid.uuid4().hex[:6]}"
        line.agent_joined(room, agent_id)  # in the fake's room, as a LiveKit job's agent
        run = await attach_agent(
            client,
            call_id,
            agent_id,
            greet=greet,
            session_factory=session_factory,
            hooks=kill_hooks(killer, on_refused=_recorder(refused)),
            idle_from_session=audio,  # on audio, idle prompts come from the caller's real silence
            own_max_duration=False,
            answer_pending=False,  # the simulator replays the killed turn
            heartbeat_s=DISPATCH_AGENT_TIMEOUT_S / 4 if dispatches else 0,
            warn_unleased=False,  # the simulator starts each agent once the one before is dead
            voice=stack,  # the flow's voice settings, on the offline stack
        )
        if device is not None:
            await device.join(run.controller)
        return run

    machine = script.dial is not None and script.dial.answer == "voicemail"
    run = await new_agent(greet=not machine)  # AMD holds the greeting until it knows who answered
    if script.dial is not None:  # the agent's detection, its verdict as livekit-agents' AMD gives it
        verdict = "machine-vm" if machine else "human"
        report_verdict(run.controller, verdict, reason=SIMULATED_AMD, speech_s=1.2, delay_s=0.4)
        if machine:
            await run.controller.on_machine(verdict)
    if stack is not None:
        result._voiced = flow  # the result reports what production would have used (_finish)
    if audio:
        result.voice = voice_report()
        return await _run_audio(
            result,
            script,
            run,
            new_agent,
            lines,
            lane,
            handle,
            voice=voice,
            call_id=call_id,
            kill_at=kill_at,
            real_llm=real_llm,
            idle_s=idle_s,
            jobs=jobs,
        )
    await run.session.wait_for_idle()  # the greeting is spoken before the caller answers
    supervised: set[str] = set()  # supervisor turns whose action the workflow took
    i = 0
    while i < len(script.turns) and not run.controller.ended:
        turn = script.turns[i]
        if not real_llm:
            lane.replace_replies([t.llm for t in script.turns[i:] if t.llm is not None])
            lane.chat_delay = turn.llm_delay_s or 0.0
        killer.armed = kill_at == i and result.kills == 0
        if killer.armed:
            # Only turn i is replayed after the kill, so the turns before it must be in the
            # workflow by then. In a real call they are (turns are seconds apart); here they
            # are milliseconds apart, and a transition or transcript turn of turn i-1 still in
            # the outbox would die with the agent and change the call.
            await run.outbox.flush(timeout=TURN_TIMEOUT_S)
        try:
            if turn.supervisor is not None:
                differs = await asyncio.wait_for(
                    play_supervisor(run, turn, f"t{i}", supervised), TURN_TIMEOUT_S
                )
                result.diverged += [differs] if differs else []
            else:
                await asyncio.wait_for(_play(run, turn, f"t{i}", idle_s, killer), TURN_TIMEOUT_S)
            if killer.fired is None or result.kills:  # not killed in this turn
                await after_turn(jobs, run, turn, i)  # a kill may fire here too (a route's speech)
        except Killed:
            pass
        if killer.fired is not None and result.kills == 0:
            result.kills = 1
            killer.armed = False
            result.sent_dtmf += getattr(run.controller.port, "sent_dtmf", [])
            await run.kill()
            if dispatches is not None:  # LiveKit's webhook (or the silence) tells the workflow,
                line.agent_died(room, run.controller.agent_id)  # which sends an agent
                await asyncio.wait_for(dispatches.get(), TURN_TIMEOUT_S)
            run = await new_agent()
            continue  # replay this turn on the new agent
        i += 1
    record = await _hang_up(run, handle)
    result.sent_dtmf += getattr(run.controller.port, "sent_dtmf", [])
    await run.close()
    LOCAL.forget(call_id)
    return _finish(result, script, record)


async def _hang_up(run: AgentRun, handle: Any) -> Any:
    """The script is over: the caller hangs up unless the call ended; the call's record."""
    if not run.controller.ended:
        await run.controller.on_caller_hangup()
    ending = run.controller.ending
    if ending is not None:
        await asyncio.wait_for(ending, TURN_TIMEOUT_S)
    return await asyncio.wait_for(handle.handle.result(), TURN_TIMEOUT_S)


def voice_report() -> dict[str, Any]:
    """What ran (the offline stack) and what production would have used (the settings)."""
    from ringflow.simulation.audio.stack import OFFLINE

    settings = get_settings()
    production = {"stt": settings.stt, "tts": settings.tts, "vad": settings.vad, "llm": settings.llm_model}
    return {"ran": dict(OFFLINE), "production": production}


def _kind(turn: Any) -> str:
    for kind in ("user", "noise", "silence", "dtmf"):
        if getattr(turn, kind) is not None:
            return "empty" if kind == "user" and turn.empty else kind
    return "turn"


async def _run_audio(
    result: SimulationResult,
    script: Any,
    run: AgentRun,
    new_agent: Any,
    lines: list[Any],
    lane: Any,
    handle: Any,
    *,
    voice: Any,
    call_id: str,
    kill_at: int | None,
    real_llm: bool,
    idle_s: float,
    jobs: ScriptedJobs,
) -> SimulationResult:
    """The turn loop on real audio (``ringflow/simulation/audio/player.py``)."""
    from ringflow.simulation.audio.player import (
        REPLY_TIMEOUT_S,
        Caller,
        TurnTiming,
        hear_background,
        play_noise,
        play_silence,
        play_user,
        settle,
    )

    first = script.turns[0] if script.turns else None
    if first is None or first.interrupt_after_s is None:
        await run.session.wait_for_idle()  # the greeting, heard to its end
    turns: list[tuple[TurnTiming, Any, float, float]] = []  # each turn's timing, line and span
    i = 0
    while i < len(script.turns) and not run.controller.ended:
        turn = script.turns[i]
        if not real_llm:
            # A turn is over for the caller once the agent's reply starts playing, which may be
            # a transition's speech while the model's answer to the call's result is still to
            # be asked for (after an action node runs): that answer is the turn's too.
            if i > 0:
                await lane.followups_taken(REPLY_TIMEOUT_S)
            lane.replace_replies([t.llm for t in script.turns[i:] if t.llm is not None])
            lane.chat_delay = turn.llm_delay_s or 0.0
        line = lines[-1]
        caller = Caller(voice, line)
        timing = TurnTiming(turn=i, kind=_kind(turn))
        key = f"t{i}"
        turn_started = time.perf_counter()
        kill_here = kill_at == i and result.kills == 0
        if kill_here:  # what came before is in the workflow, as in a real call (see the text loop)
            await run.outbox.flush(timeout=TURN_TIMEOUT_S)
        if turn.user is not None and not turn.empty:
            run.controller.begin_turn(key)
            await asyncio.wait_for(
                play_user(
                    run,
                    caller,
                    turn.user,
                    timing,
                    interrupt_after_s=turn.interrupt_after_s,
                    cut_fraction=0.5 if kill_here else None,
                ),
                TURN_TIMEOUT_S,
            )
            if kill_here:  # the agent's process dies mid-utterance; a new one takes the call
                result.kills = 1
                await run.kill()
                await line.close()
                run = await new_agent()
                await lines[-1].until(lines[-1].quiet, REPLY_TIMEOUT_S)
                continue  # the caller says it again to the new agent
        elif turn.noise is not None:
            await asyncio.wait_for(play_noise(caller, turn.noise, timing), TURN_TIMEOUT_S)
        elif turn.silence is not None:
            run.controller.begin_turn(key)
            await asyncio.wait_for(
                play_silence(run, caller, turn.silence, timing), turn.silence + TURN_TIMEOUT_S
            )
        else:  # keys and empty speech: as in text mode
            started = time.perf_counter()
            await asyncio.wait_for(_play(run, turn, key, idle_s), TURN_TIMEOUT_S)
            await settle(line, started)
        await after_turn(jobs, run, turn, i)
        turns.append((timing, lines[-1], turn_started, time.perf_counter()))
        i += 1
    await lines[-1].until(lines[-1].quiet, REPLY_TIMEOUT_S)
    record = await _hang_up(run, handle)
    await run.close()
    for timing, line, start, end in turns:  # every frame of the background track is in by now
        hear_background(line, start, end, timing)
        result.timings.append(timing.model_dump())
    for line in lines:
        await line.close()
    LOCAL.forget(call_id)
    return _finish(result, script, record)


def _finish(result: SimulationResult, script: Any, record: Any) -> SimulationResult:
    result.path = record.path
    if result._voiced is not None:
        result.voice = {**(result.voice or {}), "by_node": production_voice(result._voiced, record.path)}
    result.end_reason = record.end_reason
    result.disposition = record.disposition
    result.variables = record.variables
    result.state = record.state
    result.transitions = max(0, len(record.path) - 1)
    result.recording = record.recording.model_dump(mode="json") if record.recording else None
    result.analysis = record.analysis.model_dump(mode="json") if record.analysis else None
    result.transcript = [
        {"role": t.get("role"), "node": t.get("node"), "text": t.get("text")} for t in record.transcript
    ]
    result.failures = check(script.expect, result.model_dump()) + result.diverged
    result.ok = not result.failures
    return result


async def _play(run: AgentRun, turn: Any, key: str, idle_s: float, killer: _Killer | None = None) -> None:
    ctrl = run.controller
    if turn.noise is not None:  # no words: text mode hears nothing
        return
    if turn.dtmf is not None:  # one key at a time, as LiveKit delivers them; the end flushes
        ctrl.begin_turn(key)
        keys = KeyCollector(ctrl)
        for k in turn.dtmf:
            await keys.press(k)
        await keys.flush()
        keys.close()
        await run.session.wait_for_idle()
        return
    if turn.empty:  # the agent's own detection of an empty input, fed what a room would give it
        ctrl.begin_turn(key)
        await play_empty(run)
        await run.session.wait_for_idle()
        return
    if turn.user is not None and ctrl.state.takeover:  # the caller speaks to the supervisor
        ctrl.begin_turn(key)
        await ctrl.on_segment_turn("user", turn.user)
        return
    if turn.user is not None:
        ctrl.begin_turn(key)
        await run.session.run(user_input=turn.user)
        if killer is not None and killer.fired:  # at a point livekit's tool call swallowed
            raise Killed("during turn")
        await run.session.wait_for_idle()
        return
    for k in range(max(1, int(turn.silence // idle_s)) if turn.silence >= idle_s else 0):
        ctrl.begin_turn(f"{key}.{k}")
        await ctrl.on_idle()
        await run.session.wait_for_idle()
        if ctrl.ended:
            return


async def play_empty(run: AgentRun) -> None:
    """Speech with no words, through the code a live room drives: on a push-to-talk node the
    client's start and end (committing a turn with nothing in it), elsewhere the caller's
    speaking then listening with no transcript coming (no grace to wait: none can come)."""
    if getattr(run.agent, "listen_mode", "auto") == "manual" and run.talk is not None:
        await run.talk.handle("start")
        await run.talk.handle("end")
        return
    watch = run.empty_speech
    if watch is None:
        await run.controller.on_idle("empty_transcript")
        return
    watch.grace_s = 0
    watch.user_state("speaking")
    watch.user_state("listening")
    if watch.timer is not None:
        await watch.timer


async def simulate(
    paths: list[Path],
    *,
    address: str | None = None,
    kill_at: int | None = None,
    real_llm: bool = False,
    resume: str = "dispatch",
    runtime: Runtime | None = None,
    codec: PayloadCodec | None = None,
    on_result: Callable[[SimulationResult], None] | None = None,
    audio: bool = False,
) -> list[SimulationResult]:
    """Every script gets its own result: one that raises is ``ok: false`` with the error,
    and the next one runs. ``on_result`` hears of each as it is known (progress). ``audio``:
    on real audio (``ringflow/simulation/audio/``)."""
    results: list[SimulationResult] = []
    trusted = flows_dir_with(get_settings().flows_dir, paths)
    if audio:
        from ringflow.simulation.audio.stack import warm

        warm()  # on this thread (livekit registers plugins on the main thread), before any call
    async with environment(address, runtime=runtime, flows_dir=trusted, codec=codec) as (
        client,
        task_queue,
        llm,
        _stack,
    ):
        for path in paths:
            try:
                results.append(
                    await run_script(
                        path,
                        client,
                        task_queue,
                        llm,
                        kill_at=kill_at,
                        real_llm=real_llm,
                        resume=resume,
                        audio=audio,
                    )
                )
            except Exception as exc:
                log.debug("script %s raised", path, exc_info=True)
                results.append(SimulationResult(script=str(path), error=describe_error(exc)))
            if on_result is not None:
                on_result(results[-1])
    return results


def describe_error(exc: BaseException) -> str:
    """One line for a script that could not run: flow and input problems as they are
    worded for ``call start``, anything else with its type."""
    if isinstance(exc, FlowError):
        return "; ".join(str(e) for e in exc.errors)
    if isinstance(exc, ScriptError):
        return str(exc)
    if isinstance(exc, TimeoutError):
        return f"a step took longer than {TURN_TIMEOUT_S:g} s (timed out)"
    return f"{type(exc).__name__}: {exc}"
