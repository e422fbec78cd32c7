"""Starting, joining, listing and ending journeys: what the CLI, the agent and the tests use.

Like ``workflows/client.py`` it names ``JourneyWorkflow`` by its name and types it with the
contract (``ringflow/contract/journey.py``), never importing the workflow: the agent
imports this module to join an inbound call to its person's journey.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.common import SearchAttributePair, TypedSearchAttributes
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from ringflow.activities import campaign_store as store
from ringflow.activities.campaign_rules import (
    RuleError,
    check_timezone,
    normalize_phone,
    parse_windows,
    timezone_for,
)
from ringflow.activities.search_attributes import (
    RINGFLOW_CAMPAIGN,
    RINGFLOW_FLOW,
    RINGFLOW_JOURNEY,
    RINGFLOW_STATUS,
)
from ringflow.callflow.errors import FlowError, Issue
from ringflow.callflow.inputs import resolve_variables, undeclared_variables
from ringflow.callflow.model import FlowDefinition
from ringflow.contract.ids import journey_workflow_ids, person_keys
from ringflow.contract.journey import (
    JOURNEY_WORKFLOW,
    EndRequest,
    JoinAnswer,
    JoinRequest,
    JourneyInput,
    JourneyView,
    journey_workflow_id,
)


def checked_journey_input(
    definition: FlowDefinition, phone: str, fields: dict[str, Any], secret: bytes | None = None
) -> tuple[JourneyInput, TypedSearchAttributes]:
    """A journey's checked input and search attributes; raises :class:`FlowError` naming
    what is wrong (the number, the timezone, a window, a node, the variables). ``secret``
    keys the person's hash in the id (``RINGFLOW_JOURNEY_KEY_SECRET``, ``contract/ids.py``)."""
    try:
        number = normalize_phone(phone)
        tz = fields.pop("timezone", None) or timezone_for(number) or "UTC"
        check_timezone(tz)
        parse_windows(list(fields.get("windows") or ["always"]))
    except RuleError as exc:
        raise FlowError([Issue("journey", str(exc))]) from None
    variables = fields.get("variables") or {}
    _, issues = resolve_variables(definition.flow, variables)
    issues += undeclared_variables(definition.flow, variables)
    first = fields.get("first_node")
    if first is not None and first not in definition.flow.nodes:
        issues.append(Issue("journey.first_node", f"the flow has no node '{first}'"))
    if issues:
        raise FlowError(issues)
    inp = JourneyInput(flow=definition, phone=number, timezone=tz, **fields)
    jid = journey_workflow_id(definition.flow.flow, number, secret)
    attrs: list[SearchAttributePair[Any]] = [
        SearchAttributePair(RINGFLOW_FLOW, definition.flow.flow),
        SearchAttributePair(RINGFLOW_JOURNEY, jid),
        SearchAttributePair(RINGFLOW_STATUS, "scheduled" if inp.first_call else "open"),
    ]
    if inp.campaign_id:
        attrs.append(SearchAttributePair(RINGFLOW_CAMPAIGN, inp.campaign_id))
    return inp, TypedSearchAttributes(attrs)


async def start_journey(
    client: Client,
    definition: FlowDefinition,
    phone: str,
    *,
    task_queue: str,
    secret: bytes | None = None,
    **fields: Any,
) -> JourneyHandle:
    """Start the person's journey of this flow (one per person and flow: a second start
    while it is open raises ``WorkflowAlreadyStartedError``, also when the open one was
    started under the unkeyed id, before ``secret`` was set)."""
    inp, attrs = checked_journey_input(definition, phone, dict(fields), secret)
    jid, *older = journey_workflow_ids(definition.flow.flow, inp.phone, secret)
    for old in older:
        if await _running(client, old):
            raise WorkflowAlreadyStartedError(old, JOURNEY_WORKFLOW)
    await client.start_workflow(
        JOURNEY_WORKFLOW,
        inp,
        id=jid,
        task_queue=task_queue,
        search_attributes=attrs,
        result_type=JourneyView,
        static_summary=f"{definition.flow.flow} journey",
    )
    return JourneyHandle(client, jid)


async def _running(client: Client, journey_id: str) -> bool:
    try:
        desc = await client.get_workflow_handle(journey_id).describe()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return False
        raise
    return desc.status == WorkflowExecutionStatus.RUNNING


async def join_journey(
    client: Client, flow: str, caller_number: str | None, req: JoinRequest, secret: bytes | None = None
) -> JoinAnswer | None:
    """An inbound call from ``caller_number``: join its person's open journey of ``flow``
    (the journey starts the call as its own, at the callback node), found under its current
    id or, for one started before ``secret`` was set, its unkeyed one. None when there is no
    open journey to join, or it refused: the call then starts on its own."""
    if not caller_number:
        return None
    try:
        number = normalize_phone(caller_number)
    except RuleError:
        return None
    for jid in journey_workflow_ids(flow, number, secret):
        handle = JourneyHandle(client, jid)
        try:
            answer = await handle.handle.execute_update("join", req, result_type=JoinAnswer)
        except WorkflowUpdateFailedError:  # refused: the journey has ended
            continue
        except RPCError as exc:
            if exc.status in (RPCStatusCode.NOT_FOUND, RPCStatusCode.FAILED_PRECONDITION):
                continue
            raise
        if answer.joined:
            return answer
    return None


async def add_do_not_call(
    client: Client, database_url: str, phones: list[str], secret: bytes | None = None
) -> list[str]:
    """Put the numbers on the do-not-call list and end their open journeys (their ids);
    a journey also checks the list right before each of its calls."""
    if not phones:
        return []
    await asyncio.to_thread(store.add_dnc, database_url, phones, time.time())
    return await end_journeys_of(client, phones, secret=secret)


async def end_journeys_of(
    client: Client, phones: list[str], reason: str = "dnc", secret: bytes | None = None
) -> list[str]:
    """End every open journey of these numbers (the do-not-call list), under either key
    (``person_keys``): their ids."""
    keys = {k for p in phones for k in person_keys(p, secret)}
    ended: list[str] = []
    if not keys:
        return ended
    query = f"WorkflowType = '{JOURNEY_WORKFLOW}' AND ExecutionStatus = 'Running'"
    async for wf in client.list_workflows(query):
        if wf.id.rsplit("-", 1)[-1] in keys:
            await JourneyHandle(client, wf.id).end(reason)
            ended.append(wf.id)
    return ended


class JourneyHandle:
    """A journey seen from outside."""

    def __init__(self, client: Client, journey_id: str) -> None:
        self.client = client
        self.journey_id = journey_id
        self.handle: WorkflowHandle[Any, Any] = client.get_workflow_handle(
            journey_id, result_type=JourneyView
        )

    async def state(self) -> JourneyView:
        return await self.handle.query("state", result_type=JourneyView)

    async def end(self, reason: str = "cancelled") -> None:
        """No further call (a live one goes on): ``cancelled``, or ``dnc``."""
        await self.handle.signal("end", EndRequest(reason=reason))

    async def result(self) -> JourneyView:
        view: JourneyView = await self.handle.result()
        return view
