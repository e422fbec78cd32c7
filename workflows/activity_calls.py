"""How the workflow calls each activity: timeouts, retries, local or not.

Handler and HTTP functions whose timeout is at most 10 s run as *local* activities:
the LLM is waiting on the tool round trip, and a local activity skips the task-queue
hop and writes one marker event instead of three. Longer ones, extraction,
persistence and webhooks run as normal activities, which survive a worker crash
mid-run and can retry for longer than a workflow task.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import CancelledError

# The activities are called by reference (their registered names are in the histories, and
# stay as ``@activity.defn(name=...)`` gives them); their modules' I/O clients are loaded
# once, outside the sandbox.
with workflow.unsafe.imports_passed_through():
    from ringflow.activities.analysis import Analyzer
    from ringflow.activities.dispatch import AgentDispatch
    from ringflow.activities.extraction import ExtractionInput, ExtractionOutput, Extractor
    from ringflow.activities.handler_run import HandlerCheck, HandlerInput, HandlerOutput, HandlerRunner
    from ringflow.activities.http_tool import HttpTool, HttpToolRequest
    from ringflow.activities.kb_search import KbSearcher, KbSearchRequest
    from ringflow.activities.mcp_tools import (
        McpCallRequest,
        McpCallResult,
        McpListRequest,
        mcp_call_tool,
        mcp_list_tools,
    )
    from ringflow.activities.persistence import CallStore
    from ringflow.activities.recording import RecordingActivities
    from ringflow.activities.telephony import TelephonyActivities
    from ringflow.activities.turn_journal import TurnJournalReader
    from ringflow.activities.webhook import WEBHOOK_RETRY_POLICY, WebhookSender
    from ringflow.callflow.effects import RunFunction
    from ringflow.callflow.events import FunctionResult
    from ringflow.callflow.knowledge import KnowledgeSearch
    from ringflow.callflow.mcp_spec import UNAVAILABLE as MCP_UNAVAILABLE
    from ringflow.callflow.mcp_spec import McpServer, McpServerTools
    from ringflow.callflow.model import FlowDefinition, Retry
    from ringflow.callflow.state import CallState
    from ringflow.callflow.subflow_handlers import handler_module
    from ringflow.contract.analysis import AnalysisInput, CallAnalysis
    from ringflow.contract.dial import DispatchRequest, DispatchResult, TransferRequest
    from ringflow.contract.journal import JournalEntries, JournalRead
    from ringflow.contract.recording import RecordingInfo, RecordingRequest
    from ringflow.contract.records import CallRecord, TranscriptAppend, WebhookDelivery
    from ringflow.contract.updates import EXTRACTION_TIMEOUT_S

LOCAL_MAX_TIMEOUT_S = 10.0
HEARTBEAT_TIMEOUT_S = 2.0  # a cancellable handler heartbeats (activities/handler_run.py)
CANCELLED = "was cancelled: the caller started talking (cancel_on_interruption)"
_DURABLE = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30))


def retry_policy(r: Retry | None) -> RetryPolicy:
    r = r or Retry()
    return RetryPolicy(
        initial_interval=timedelta(seconds=r.initial_interval_s),
        backoff_coefficient=r.backoff,
        maximum_attempts=r.max_attempts,
    )


async def _execute(
    activity: Callable[..., Awaitable[Any]],
    arg: Any,
    timeout_s: float,
    retry: RetryPolicy,
    on_start: Callable[[asyncio.Task[Any]], None] | None = None,
) -> Any:
    """Start the activity (``execute_*`` is start then await: the same commands).

    With ``on_start`` (a run the caller may cancel) it gets the handle, and the activity is
    a normal one that heartbeats: a local activity holds the workflow task open while it
    runs, so the signal asking to cancel it would only be read once it had finished, and
    only a heartbeating activity hears that it was cancelled."""
    handle: asyncio.Task[Any]
    if timeout_s <= LOCAL_MAX_TIMEOUT_S and on_start is None:
        handle = workflow.start_local_activity(
            activity,
            args=[arg],
            start_to_close_timeout=timedelta(seconds=timeout_s + 1),
            schedule_to_close_timeout=timedelta(seconds=(timeout_s + 1) * 4),
            retry_policy=retry,
        )
    else:
        handle = workflow.start_activity(
            activity,
            args=[arg],
            start_to_close_timeout=timedelta(seconds=timeout_s + 1),
            retry_policy=retry,
            heartbeat_timeout=timedelta(seconds=HEARTBEAT_TIMEOUT_S) if on_start is not None else None,
        )
    if on_start is not None:
        on_start(handle)
    return await handle


async def handlers_problem(check: HandlerCheck) -> str | None:
    """Whether the worker's handler code is the published version's (a local activity: one
    marker at the call's start, and a worker that cannot read its files retries it)."""
    out: str | None = await workflow.execute_local_activity_method(
        HandlerRunner.check_handlers,
        check,
        start_to_close_timeout=timedelta(seconds=10),
        retry_policy=RetryPolicy(maximum_attempts=3),
    )
    return out


def cancelled(eff: RunFunction) -> FunctionResult:
    """The result of a run cancelled because the caller started talking (cancel_on_interruption)."""
    return FunctionResult(run_id=eff.run_id, error=f"{eff.name} {CANCELLED}")


async def run_function(
    eff: RunFunction,
    definition: FlowDefinition,
    state: CallState,
    current: Callable[[], dict[str, Any]] | None = None,
    on_start: Callable[[asyncio.Task[Any]], None] | None = None,
    key: str | None = None,
    room: str | None = None,
) -> FunctionResult:
    """Run a handler or HTTP entry; failures after retries become an error result, and so
    does a cancellation (through the handle given to ``on_start``).

    ``current`` gives the call's state when the result arrives: the handler's changes are
    merged into it, so writes made meanwhile (another handler, a capture) survive. ``key``
    is the HTTP request's ``Idempotency-Key`` and a handler's ``flow_manager.idempotency_key``
    (``<call id>:<event id>`` for a tool the LLM called); without one (an action node, a
    node's action) it is ``<call id>:<run id>``. ``room``: the call's LiveKit room,
    where a transfer finds the caller."""
    if eff.kind == "transfer" and eff.transfer is not None:
        return await transfer(eff, state, room or state.call_id)
    try:
        if eff.kind == "mcp":
            return await call_mcp_tool(eff, definition, state)
        if eff.kind == "knowledge":
            return await search_knowledge(eff, definition, state)
        if eff.kind == "http" and eff.http is not None:
            # named, not rendered: this input is history, the rendered headers hold credentials
            req = HttpToolRequest(
                call_id=state.call_id,
                seq=eff.run_id,
                method=eff.http.method,
                node=eff.node,
                entry=eff.name,
                args=eff.args,
                values=eff.http_values or {},
                timeout_s=eff.timeout_s,
                idempotency_key=key,
            )
            out = await _execute(HttpTool.http_tool, req, eff.timeout_s, retry_policy(eff.retry), on_start)
            return FunctionResult(run_id=eff.run_id, result=out)
        module, source = handler_module(definition, eff.scope)
        inp = HandlerInput(
            call_id=state.call_id,
            node=eff.node,
            name=eff.name,
            module=module,
            flow_source=source,
            subflow=bool(eff.scope),
            args=eff.args,
            variables=state.variables,
            state=state.state,
            timeout_s=eff.timeout_s,
            idempotency_key=key or f"{state.call_id}:{eff.run_id}",
        )
        hout: HandlerOutput = await _execute(
            HandlerRunner.run_handler, inp, eff.timeout_s, retry_policy(eff.retry), on_start
        )
        merged = None
        if hout.error is None:
            base = current() if current is not None else state.state
            merged = {k: v for k, v in base.items() if k not in hout.removed} | hout.changed
        return FunctionResult(
            run_id=eff.run_id, result=hout.result, response=hout.response, error=hout.error, state=merged
        )
    except Exception as exc:  # ActivityError after retries: the LLM hears about it, the call goes on
        cause = getattr(exc, "cause", None) or exc
        if isinstance(cause, CancelledError):
            return cancelled(eff)
        return FunctionResult(run_id=eff.run_id, error=f"{eff.name} failed: {cause}")


async def call_mcp_tool(eff: RunFunction, definition: FlowDefinition, state: CallState) -> FunctionResult:
    server = definition.flow.mcp_servers.get(eff.mcp_server or "")
    if server is None or not eff.mcp_tool:
        return FunctionResult(
            run_id=eff.run_id, error=f"{eff.name}: MCP server '{eff.mcp_server}' is not declared"
        )
    # the activity reads the server (its headers hold credentials) from the call's definition
    req = McpCallRequest(
        call_id=state.call_id,
        seq=eff.run_id,
        server_name=eff.mcp_server or "",
        tool=eff.mcp_tool,
        args=eff.args,
    )
    try:
        out: McpCallResult = await _execute(mcp_call_tool, req, eff.timeout_s, retry_policy(eff.retry))
    except Exception as exc:  # after retries
        cause = getattr(exc, "cause", None) or exc
        return FunctionResult(run_id=eff.run_id, error=f"{MCP_UNAVAILABLE}: {cause}")
    return FunctionResult(run_id=eff.run_id, result=out.result, error=out.error)


async def search_knowledge(eff: RunFunction, definition: FlowDefinition, state: CallState) -> FunctionResult:
    """The flow's knowledge base, as it was when the call started (``as_of``), searched for
    the LLM's query; a search that fails after its retries is an error the LLM hears."""
    bounds = eff.knowledge or KnowledgeSearch()
    query = eff.args.get("query")
    req = KbSearchRequest(
        call_id=state.call_id,
        kb=definition.flow.flow,
        query=str(query)[:2000] if query else "?",
        top_k=bounds.top_k,
        max_bytes=bounds.max_bytes,
        as_of=state.started_at,
    )
    try:
        out = await _execute(KbSearcher.kb_search, req, eff.timeout_s, retry_policy(eff.retry))
    except Exception as exc:  # after retries
        cause = getattr(exc, "cause", None) or exc
        return FunctionResult(run_id=eff.run_id, error=f"{eff.name}: the knowledge search failed: {cause}")
    return FunctionResult(run_id=eff.run_id, result=out)


async def list_mcp_tools(req: McpListRequest, server: McpServer) -> McpServerTools:
    """A server's tools for the call being started; after retries, the failure in words."""
    # The call's first turn waits for this: each attempt gets a connection and a few pages
    # (every request bounded by the server's timeout), all attempts together a few more.
    timeout = server.timeout_s
    try:
        out: McpServerTools = await workflow.execute_activity(
            mcp_list_tools,
            req,
            start_to_close_timeout=timedelta(seconds=timeout * 2 + 2),
            schedule_to_close_timeout=timedelta(seconds=timeout * 4 + 5),
            retry_policy=RetryPolicy(initial_interval=timedelta(seconds=0.5), maximum_attempts=3),
        )
        return out
    except Exception as exc:
        cause = getattr(exc, "cause", None) or exc
        return McpServerTools(error=str(cause)[:300])


async def extract(inp: ExtractionInput) -> ExtractionOutput:
    """Bounded, retries included, by ``EXTRACTION_TIMEOUT_S``: a gate or prompt may be
    waiting for these values while the caller hears the wait speech."""
    return await workflow.execute_activity_method(
        Extractor.extract_variables,
        inp,
        start_to_close_timeout=timedelta(seconds=EXTRACTION_TIMEOUT_S),
        schedule_to_close_timeout=timedelta(seconds=EXTRACTION_TIMEOUT_S),
        retry_policy=RetryPolicy(initial_interval=timedelta(seconds=0.5), maximum_attempts=3),
    )


async def persist(record: CallRecord) -> None:
    await workflow.execute_activity_method(
        CallStore.persist_call, record, start_to_close_timeout=timedelta(seconds=30), retry_policy=_DURABLE
    )


async def append_transcript(batch: TranscriptAppend) -> None:
    await workflow.execute_activity_method(
        CallStore.append_transcript,
        batch,
        start_to_close_timeout=timedelta(seconds=30),
        retry_policy=_DURABLE,
    )


async def webhook(delivery: WebhookDelivery) -> None:
    await workflow.execute_activity_method(
        WebhookSender.post_call_webhook,
        delivery,
        start_to_close_timeout=timedelta(seconds=30),
        retry_policy=WEBHOOK_RETRY_POLICY,
    )


async def dispatch_agent(req: DispatchRequest) -> DispatchResult:
    try:
        return await workflow.execute_activity_method(
            AgentDispatch.dispatch_agent,
            req,
            start_to_close_timeout=timedelta(seconds=15),
            retry_policy=RetryPolicy(maximum_attempts=2),
        )
    except Exception as exc:
        return DispatchResult(dispatched=False, detail=f"dispatch failed: {exc}")


async def transfer(eff: RunFunction, state: CallState, room: str) -> FunctionResult:
    """A transfer entry: the ``transfer_call`` activity (``activities/telephony.py``), which
    never transfers twice across retries. Whatever goes wrong is a result ``failed`` (the
    engine then sends the caller to the entry's fallback), never a call left on hold."""
    assert eff.transfer is not None
    req = TransferRequest(
        call_id=state.call_id,
        room=room,
        to=eff.transfer.to,
        mode=eff.transfer.mode,
        announce=eff.transfer.announce,
    )
    try:
        out = await workflow.execute_activity_method(
            TelephonyActivities.transfer_call,
            req,
            start_to_close_timeout=timedelta(seconds=60 if req.mode == "cold" else 150),
            retry_policy=RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=3),
        )
    except Exception as exc:
        cause = getattr(exc, "cause", None) or exc
        out = {"status": "failed", "detail": f"the transfer could not be made: {cause}"[:300]}
    return FunctionResult(run_id=eff.run_id, result=out)


JOURNAL_TIMEOUT_S = 5.0


async def read_turn_journal(req: JournalRead) -> JournalEntries:
    """What the call's last agent queued and never sent (``workflows/journal_recovery.py``):
    a local activity, a few tries, then the caller notes the failure and carries on."""
    result: JournalEntries = await _execute(
        TurnJournalReader.read_turn_journal,
        req,
        JOURNAL_TIMEOUT_S,
        RetryPolicy(initial_interval=timedelta(milliseconds=200), maximum_attempts=3),
    )
    return result


_RECORDING_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=10), maximum_attempts=5
)


async def start_recording(req: RecordingRequest) -> RecordingInfo:
    """``start_recording`` (``activities/recording.py``), which finds an egress an earlier
    attempt started instead of starting a second. Whatever goes wrong is a ``failed``
    recording, never a failed call."""
    try:
        out: RecordingInfo = await workflow.execute_activity_method(
            RecordingActivities.start_recording,
            req,
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=_RECORDING_RETRY,
        )
    except Exception as exc:
        cause = getattr(exc, "cause", None) or exc
        return RecordingInfo(status="failed", error=f"the recording could not start: {cause}"[:500])
    return out


async def stop_recording(req: RecordingRequest) -> RecordingInfo:
    """``stop_recording``: stops the egress and waits for its file (heartbeating while the
    egress finishes the upload)."""
    try:
        out: RecordingInfo = await workflow.execute_activity_method(
            RecordingActivities.stop_recording,
            req,
            start_to_close_timeout=timedelta(seconds=120),
            heartbeat_timeout=timedelta(seconds=20),
            retry_policy=_RECORDING_RETRY,
        )
    except Exception as exc:
        cause = getattr(exc, "cause", None) or exc
        return RecordingInfo(
            id=req.egress_id, status="failed", error=f"the recording could not be stopped: {cause}"[:500]
        )
    return out


async def analyze(inp: AnalysisInput) -> CallAnalysis:
    """``analyze_call`` (``activities/analysis.py``): a few tries, then the last failure is
    the analysis's ``error`` and the call's record stands without it."""
    try:
        out: CallAnalysis = await workflow.execute_activity_method(
            Analyzer.analyze_call,
            inp,
            start_to_close_timeout=timedelta(seconds=90),
            retry_policy=RetryPolicy(
                initial_interval=timedelta(seconds=1),
                maximum_interval=timedelta(seconds=20),
                maximum_attempts=4,
            ),
        )
    except Exception as exc:
        cause = getattr(exc, "cause", None) or exc
        return CallAnalysis(error=f"the analysis could not run: {cause}"[:500])
    return out
