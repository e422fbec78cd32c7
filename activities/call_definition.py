"""The running call's flow definition, read back from its own history by an activity.

An activity's input is recorded in the call's history (a local activity's marker too), so
what it needs that holds the flow's credentials (an HTTP entry's headers, an MCP server's
``headers``) is not passed in: the activity reads the definition from the event that
started the call's current run (the call's input, which holds the flow already) and takes
what it needs from there. Reading it costs one history page of one event; a worker keeps
the last few definitions, since a call's tools run several times per run.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from temporalio import activity
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.workflowservice.v1 import GetWorkflowExecutionHistoryRequest
from temporalio.exceptions import ApplicationError

from ringflow.callflow.model import FlowDefinition

CALL_DEFINITION_UNAVAILABLE = "CallDefinitionUnavailable"
_KEPT = 64
_cache: OrderedDict[str, FlowDefinition] = OrderedDict()


async def call_definition() -> FlowDefinition:
    """The definition in the current run's input; retryable if the history cannot be read."""
    info = activity.info()
    key = f"{info.namespace}/{info.workflow_id}/{info.workflow_run_id}"
    if (found := _cache.get(key)) is not None:
        _cache.move_to_end(key)
        return found
    client = activity.client()
    try:
        page = await client.workflow_service.get_workflow_execution_history(
            GetWorkflowExecutionHistoryRequest(
                namespace=info.namespace,
                maximum_page_size=1,
                execution=WorkflowExecution(
                    workflow_id=info.workflow_id or "", run_id=info.workflow_run_id or ""
                ),
            )
        )
    except Exception as exc:  # the frontend briefly unreachable: a retry can fix it
        raise ApplicationError(
            f"the call's definition could not be read: {type(exc).__name__}", type=CALL_DEFINITION_UNAVAILABLE
        ) from None
    started = page.history.events[0].workflow_execution_started_event_attributes
    try:
        [raw] = await client.data_converter.decode(list(started.input.payloads)[:1], [dict])
        definition = FlowDefinition.model_validate(_definition_of(raw))
    except Exception as exc:  # not a call's input: the same history would fail again
        raise ApplicationError(
            f"the call's input holds no flow definition: {type(exc).__name__}",
            type=CALL_DEFINITION_UNAVAILABLE,
            non_retryable=True,
        ) from None
    _cache[key] = definition
    while len(_cache) > _KEPT:
        _cache.popitem(last=False)
    return definition


def _definition_of(raw: Any) -> Any:
    if not isinstance(raw, dict) or "definition" not in raw:
        raise ValueError("no 'definition'")
    return raw["definition"]
