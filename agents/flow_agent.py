"""The LiveKit side of a call: one ``Agent`` whose prompt and tools follow the node.

There is one agent for the whole call. A node change updates its instructions and tools
in place (no new session, no handoff, no audio gap); the tools are raw JSON-schema
function tools built from the engine's tool specs, each forwarding to the controller.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import logging
import time
from collections.abc import AsyncIterable
from typing import Any

from livekit.agents import (
    Agent,
    AgentSession,
    FlushSentinel,
    FunctionToolsExecutedEvent,
    ModelSettings,
    StopResponse,
    function_tool,
)
from livekit.agents import llm as lk_llm
from opentelemetry import trace

from ringflow.agents.controller import AgentStopped, FlowController
from ringflow.agents.device_tools import offer
from ringflow.agents.jobs import offer_cancel
from ringflow.agents.listen import apply_listen
from ringflow.agents.metrics import observe_tool_call
from ringflow.agents.voice import VoiceControl
from ringflow.callflow.effects import SetNode, ToolSpec
from ringflow.callflow.end_reasons import EndReason
from ringflow.contract.supervision import SUPERVISOR_MARK

log = logging.getLogger(__name__)
TRACER = trace.get_tracer("ringflow.agent")  # a no-op until ringflow.tracing installs a provider
SUMMARY_TIMEOUT_S = 5.0
# True while a tool of ours runs (a context variable: only code the tool awaits sees it).
IN_TOOL: contextvars.ContextVar[bool] = contextvars.ContextVar("ringflow_in_tool", default=False)
SUMMARY_PREFIX = "(Summary of the call so far: "
SUMMARY_PROMPT = (
    "Summarise the conversation so far in three sentences for whoever takes over: "
    "who the caller is, what they want, and what was agreed."
)


def summary_message(summary: str) -> str:
    """The summary as the new node's context holds it (an assistant message), and as the
    transcript keeps it (a system turn), so that an agent taking over rebuilds the same."""
    return f"{SUMMARY_PREFIX}{summary})"


def segment_text(role: str, text: str) -> str:
    """A turn of a supervisor's segment as the bot's LLM context holds it."""
    return f"{SUPERVISOR_MARK} {text}" if role == "supervisor" else text


def result_text(result: Any) -> str | None:
    """A result as the LLM reads it: JSON (livekit would otherwise send ``str()`` of a dict,
    Python's repr with single quotes, ``True`` and ``None``)."""
    if result is None or isinstance(result, str):
        return result
    return json.dumps(result, ensure_ascii=False, default=str)


RETRIEVAL_NOTE = (
    "Passages from the knowledge base for the caller's last turn, nearest first, each with its "
    "source. Answer from them; if they do not hold the answer, say you do not know."
)
HEARD_TIMEOUT_S = 10.0  # a reply to a turn livekit never commits (interrupted): no retrieval


def passages_note(out: dict[str, Any]) -> str | None:
    """The retrieval's passages as the system note the LLM reads with the caller's turn; None
    when the search found nothing (or failed: the transcript's ``tool`` turn says why)."""
    passages = [p for p in out.get("passages") or [] if isinstance(p, dict)]
    if out.get("status") != "ok" or not passages:
        return None
    lines = [f"[{p.get('source')}#{p.get('chunk')}] {p.get('text')}" for p in passages]
    return "\n\n".join([RETRIEVAL_NOTE, *lines])


def _said_by(item: lk_llm.ChatItem, role: str) -> bool:
    return isinstance(item, lk_llm.ChatMessage) and item.role == role


def tool_span(call_id: str, name: str, node: str | None) -> contextlib.AbstractContextManager[Any]:
    """The tool call's span (the Temporal update it sends is its child) when a tracer provider
    is installed; nothing at all otherwise, so the hot path is unchanged with tracing off.
    Exceptions are not recorded: their messages can quote the caller."""
    if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return contextlib.nullcontext()
    return TRACER.start_as_current_span(
        "ringflow.agent.tool_call",
        record_exception=False,
        set_status_on_exception=False,
        attributes={"ringflow.call_id": call_id, "ringflow.function": name, "ringflow.node": node or ""},
    )


UNKNOWN_FUNCTION = "Unknown function: "  # how livekit-agents answers a name it was not given
UNOFFERED = "?"  # marks such a call when reported: no function name starts with it


def build_tool(spec: ToolSpec, controller: FlowController) -> lk_llm.RawFunctionTool:
    async def call(raw_arguments: dict[str, Any]) -> lk_llm.ToolResult:
        token = IN_TOOL.set(True)
        try:
            node, before = controller.node, controller.state.transitions
            args = dict(raw_arguments or {})
            with tool_span(controller.call.call_id, spec.name, node):
                started = time.perf_counter()
                out = await controller.on_tool_call(spec.name, args)
            if out.error and controller.on_refused is not None:  # a simulation's (agents/hooks.py)
                controller.on_refused(spec.name, dict(args), out.result, node)
            observe_tool_call(
                controller.engine.definition.flow.flow,
                before,
                controller.state.transitions,
                (node, spec.name) not in controller.remote,
                time.perf_counter() - started,
            )
        finally:
            IN_TOOL.reset(token)
        text = result_text(out.result)
        if out.error and out.run_llm:  # the same {"status": "error", ...} text, flagged as an error
            raise lk_llm.ToolError(text or "error")
        # (an error needing no reply: a run cancelled because the caller talked over it)
        return lk_llm.ToolResult(text, reply_required=out.run_llm)  # livekit's name for run_llm

    schema: dict[str, Any] = {
        "name": spec.name,
        "description": spec.description,
        "parameters": spec.parameters,
    }
    if spec.strict:
        schema["strict"] = True
    return function_tool(call, raw_schema=schema)


class FlowAgent(Agent):
    """Starts on the call's current node; ``on_enter`` applies the node's entry effects."""

    def __init__(
        self, controller: FlowController, first: SetNode | None, chat_ctx: lk_llm.ChatContext | None = None
    ) -> None:
        self.controller = controller
        tools: list[lk_llm.Tool | lk_llm.Toolset] = (
            [build_tool(t, controller) for t in first.tools] if first else []
        )
        super().__init__(instructions=first.prompt if first else "", tools=tools, chat_ctx=chat_ctx)
        if first is not None:
            self.set_interruptible(first.allow_interrupt)
            apply_listen(self, first.listen)
        # automatic retrieval (``knowledge:`` on a node): the caller's turn whose passages
        # the LLM reads (its message id and the note, None when there were none), and the
        # user messages the controller has recorded (livekit commits a turn while its reply
        # is already being generated: the retrieval waits for it, so it follows the turn)
        self.retrieved: tuple[str, str | None] | None = None
        self.heard_ids: dict[str, asyncio.Future[None]] = {}

    async def on_user_turn_completed(
        self, turn_ctx: lk_llm.ChatContext, new_message: lk_llm.ChatMessage
    ) -> None:
        """A turn with no words (a push-to-talk press released in silence) is not answered:
        it is an empty input, which ``agents/listen.py`` hands to the idle rule. While a
        supervisor has the call the caller's turn is theirs: recorded here as a ``user`` turn
        of the takeover (livekit commits no turn it is told not to answer), never answered."""
        text = (new_message.text_content or "").strip()
        if not text:
            raise StopResponse()
        if self.controller.state.takeover:
            await self.controller.on_segment_turn("user", text)
            raise StopResponse()

    async def llm_node(
        self, chat_ctx: lk_llm.ChatContext, tools: list[lk_llm.Tool], model_settings: ModelSettings
    ) -> AsyncIterable[lk_llm.ChatChunk | str | FlushSentinel]:
        """Every reply (to the caller, to a tool's result, a node's first turn) starts here:
        an agent that no longer serves the call (its lease is gone, another agent answers
        the caller now) says nothing, and the model is not asked."""
        if not await self.controller.current("reply"):
            return
        chat_ctx = await self.with_passages(chat_ctx)
        if self.controller.dead:  # killed during the search
            return
        async for chunk in Agent.default.llm_node(self, chat_ctx, tools, model_settings):
            yield chunk

    def user_item_added(self, item_id: str) -> None:
        """The controller recorded this user message (``conversation_item_added``)."""
        fut = self.heard_ids.setdefault(item_id, asyncio.get_running_loop().create_future())
        if not fut.done():
            fut.set_result(None)
        while len(self.heard_ids) > 8:
            self.heard_ids.pop(next(iter(self.heard_ids)))

    async def with_passages(self, chat_ctx: lk_llm.ChatContext) -> lk_llm.ChatContext:
        """On a node with automatic retrieval, the caller's last turn with the passages found
        for it: searched once per turn (when the reply answers the turn itself), given to
        each generation of that turn (the reply after a tool's result too), in a copy of
        the context: never kept in the agent's history, so the prompt does not grow."""
        ctrl = self.controller
        if not ctrl.retrieves():
            return chat_ctx
        items = chat_ctx.items
        at = next(
            (i for i in range(len(items) - 1, -1, -1) if _said_by(items[i], "user")),
            None,
        )
        msg = items[at] if at is not None else None
        if at is None or not isinstance(msg, lk_llm.ChatMessage):
            return chat_ctx
        if self.retrieved is None or self.retrieved[0] != msg.id:
            query = (msg.text_content or "").strip()
            if at != len(items) - 1 or not query:
                return chat_ctx  # not a reply to the caller's turn: nothing searched for it
            fut = self.heard_ids.setdefault(msg.id, asyncio.get_running_loop().create_future())
            try:
                await asyncio.wait_for(asyncio.shield(fut), HEARD_TIMEOUT_S)
            except TimeoutError:
                return chat_ctx
            try:
                out = await ctrl.retrieve(query)
            except AgentStopped:
                return chat_ctx
            self.retrieved = (msg.id, passages_note(out) if out is not None else None)
        note = self.retrieved[1]
        if note is None:
            return chat_ctx
        ctx = chat_ctx.copy()
        ctx.items.insert(at + 1, lk_llm.ChatMessage(role="system", content=[note], created_at=msg.created_at))
        return ctx

    def set_interruptible(self, allow: bool) -> None:
        """The node's ``allow_interrupt`` as this agent's default: livekit reads it for every
        speech it creates itself (replies to the caller, replies to tool results). livekit-agents
        1.8 has no public setter (only the constructor's ``turn_handling`` and the per-call
        ``allow_interruptions`` of ``say``/``generate_reply``, which miss those replies), hence
        the private attribute, and pyproject's pin below 1.9."""
        self._allow_interruptions = allow


class LiveKitPort:
    """Applies the controller's decisions to a live ``AgentSession``."""

    def __init__(self, session: AgentSession, agent: FlowAgent, *, close: Any = None) -> None:
        self.session = session
        self.agent = agent
        self.close = close  # async () -> None: hang up the room (a SIP caller is disconnected)
        self.ending: asyncio.Task[None] | None = None
        self.deferred_reply: tuple[str | None, bool] | None = None  # an LLM turn asked for in a tool
        self.released: asyncio.Future[None] | None = None  # done once that turn has started
        # async (digits) -> None: press keys on the line (LiveKit: publish_dtmf); unset in text mode
        self.dtmf_sender: Any = None
        self.sent_dtmf: list[str] = []  # what the bot pressed, in order (simulation, tests)
        # async (topic, payload) -> None: a LiveKit data message to the room; unset in text mode
        self.data_sender: Any = None
        self.published: list[tuple[str, bytes]] = []  # what went to the room (simulation, tests)
        self.voice: VoiceControl | None = None  # the flow's voice settings, node by node (agents/voice.py)
        self.unoffered: set[asyncio.Task[Any]] = set()  # refusals livekit made, being reported
        session.on("function_tools_executed", self._tools_executed)

    async def heard_keys(self, digits: str) -> None:
        """The caller's keys, as a user message in the LLM's context (what it answers next)."""
        ctx = self.agent.chat_ctx.copy()
        ctx.add_message(role="user", content=f"[keys {digits}]")
        await self.agent.update_chat_ctx(ctx)

    async def note(self, text: str) -> None:
        """A background job's envelope, as a system note in the LLM's context."""
        ctx = self.agent.chat_ctx.copy()
        ctx.add_message(role="system", content=text)
        await self.agent.update_chat_ctx(ctx)

    async def pause(self) -> None:
        """A supervisor took the call over: the bot stops speaking at once (even a reply it
        may not be interrupted in) and says nothing until the hand-back; what the caller says
        is still transcribed and kept, never answered (``FlowAgent.on_user_turn_completed``)."""
        with contextlib.suppress(Exception):  # nothing under way, or a closing session
            await self.session.interrupt(force=True)
        if self.session.output.audio is not None:  # (text mode has no voice to mute)
            self.session.output.set_audio_enabled(False)

    async def resume(self) -> None:
        """The hand-back: the bot's voice again (what it says next is the engine's)."""
        if self.session.output.audio is not None:
            self.session.output.set_audio_enabled(True)

    async def heard(self, role: str, text: str) -> None:
        """A turn of the supervisor's segment, into the LLM's context (the bot takes it up
        at the hand-back): the supervisor's lines as the assistant's, marked."""
        ctx = self.agent.chat_ctx.copy()
        ctx.add_message(
            role="assistant" if role == "supervisor" else "user", content=segment_text(role, text)
        )
        await self.agent.update_chat_ctx(ctx)

    async def publish(self, topic: str, payload: bytes) -> None:
        """A data message to the room (``ringflow.jobs``: a client shows the jobs' progress)."""
        self.published.append((topic, payload))
        if self.data_sender is not None:
            await self.data_sender(topic, payload)

    async def send_dtmf(self, digits: str) -> None:
        """A ``send_dtmf`` entry's keys, pressed on the SIP line (to navigate an IVR)."""
        self.sent_dtmf.append(digits)
        if self.dtmf_sender is not None:
            await self.dtmf_sender(digits)

    async def set_node(self, eff: SetNode) -> None:
        eff = offer(self.agent.controller, eff)  # the caller's device's tools, if the node offers them
        eff = offer_cancel(self.agent.controller, eff)  # cancel_jobs, while a cancellable group runs
        self.agent.set_interruptible(eff.allow_interrupt)
        apply_listen(self.agent, eff.listen)
        if self.voice is not None:
            self.voice.apply(self.agent, eff.node)
        await self.agent.update_instructions(eff.prompt)
        await self.agent.update_tools([build_tool(t, self.agent.controller) for t in eff.tools])
        if eff.context == "reset":
            await self.agent.update_chat_ctx(self.cleared())
        elif eff.context == "reset_with_summary":
            summary = await self.summarise()
            if summary:
                ctx = self.cleared()
                text = summary_message(summary)
                ctx.add_message(role="assistant", content=text)
                await self.agent.update_chat_ctx(ctx)
                self.agent.controller.on_turn("system", text)  # kept for a successor agent

    async def update_tools(self, tools: list[ToolSpec]) -> None:
        """The node's tools changed while on it (the caller's device advertised its own)."""
        await self.agent.update_tools([build_tool(t, self.agent.controller) for t in tools])

    def cleared(self) -> lk_llm.ChatContext:
        """An empty context but for the instructions, kept as the same item so they stay first:
        livekit orders items by creation time, and with a fresh instructions message the
        transition's own tool call (made earlier, inside which this runs) would precede it."""
        ctx = lk_llm.ChatContext.empty()
        ctx.items.extend(i for i in self.agent.chat_ctx.items if i.type == "message" and i.role == "system")
        return ctx

    async def summarise(self) -> str | None:
        """``reset_with_summary``: the LLM summarises under a timeout; on failure, keep all."""
        model = self.session.llm
        if not isinstance(model, lk_llm.LLM):
            return None
        ctx = self.agent.chat_ctx.copy()
        ctx.add_message(role="user", content=SUMMARY_PROMPT)

        async def run() -> str:
            parts: list[str] = []
            async with model.chat(chat_ctx=ctx) as stream:
                async for chunk in stream:
                    if chunk.delta and chunk.delta.content:
                        parts.append(chunk.delta.content)
            return "".join(parts).strip()

        try:
            return await asyncio.wait_for(run(), SUMMARY_TIMEOUT_S) or None
        except Exception as exc:  # the fallback is 'append': the call goes on with full context
            log.warning("summary for context reset failed (%s); keeping the context", type(exc).__name__)
            return None

    def say(self, text: str, allow_interrupt: bool) -> None:
        self.session.say(text, allow_interruptions=allow_interrupt, add_to_chat_ctx=True)

    def reply(self, instructions: str | None, allow_interrupt: bool) -> None:
        """An LLM turn. Asked for from inside a tool (a transition into a node that responds
        at once), it waits until the tool's output is in the chat context: started now, the
        request would carry livekit's "still in progress" stand-in for the transition's
        result, and the model could wait for, or re-issue, a call that already happened."""
        if IN_TOOL.get():
            self.deferred_reply = (instructions, allow_interrupt)
            return
        self._generate(instructions, allow_interrupt)

    def _tools_executed(self, ev: FunctionToolsExecutedEvent) -> None:
        """livekit emits this just before it commits the tools' calls and outputs to the
        chat context, in the same synchronous step: the deferred turn starts on the next
        loop iteration, after that commit.

        A call of a name the speech was not given as a tool is answered by livekit itself
        ("Unknown function: ..."), before any of this agent's code runs: it is handed to the
        controller marked (:data:`UNOFFERED`), a name no flow can have, so that both engines
        refuse and count it as the flow's refusal without ever running a function of that
        name (the call may have moved meanwhile to a node that has one)."""
        for fc, out in ev.zipped():
            if out.is_error and str(out.output).startswith(UNKNOWN_FUNCTION):
                task = asyncio.get_running_loop().create_task(self._unoffered(fc.name))
                self.unoffered.add(task)
                task.add_done_callback(self.unoffered.discard)
        if self.deferred_reply is not None and self.released is None:
            loop = asyncio.get_running_loop()
            self.released = loop.create_future()
            loop.call_soon(self._release)

    async def _unoffered(self, name: str) -> None:
        try:
            await self.agent.controller.on_tool_call(f"{UNOFFERED}{name}", {})
        except AgentStopped:  # replaced or ended meanwhile: nothing left to count it in
            pass

    def _release(self) -> None:
        pending, self.deferred_reply = self.deferred_reply, None
        released, self.released = self.released, None
        if pending is not None:
            self._generate(*pending)
        if released is not None and not released.done():
            released.set_result(None)

    def _generate(self, instructions: str | None, allow_interrupt: bool) -> None:
        kwargs: dict[str, Any] = {"allow_interruptions": allow_interrupt, "tool_choice": "auto"}
        if instructions:
            kwargs["instructions"] = instructions
        self.session.generate_reply(**kwargs)

    async def end_call(self, reason: EndReason) -> None:
        if self.ending is None:
            self.ending = asyncio.get_running_loop().create_task(self._end(reason))

    async def _end(self, reason: EndReason) -> None:
        """Let the last turn be spoken, tell the workflow, then hang up the room. The last
        turn may be one held back until its tool finished (an end node entered by a tool):
        it is released, or released now if livekit never said the tools were done."""
        await self.session.wait_for_idle()
        if self.released is not None or self.deferred_reply is not None:
            if self.released is not None:
                await self.released
            else:
                self._release()
            await self.session.wait_for_idle()
        await self.agent.controller.finish(reason)
        # A transferred caller talks to the person now (warm: in this very room): leave, do
        # not close the room. Any other end hangs the caller up by closing it, unless this
        # agent was replaced meanwhile: the caller is its successor's.
        if (
            self.close is not None
            and reason != "transferred"
            and await self.agent.controller.may_close_room()
        ):
            await self.close()
