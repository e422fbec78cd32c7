"""``/v1/webhooks``: the endpoint a deployment delivers call events to, a signed test delivery,
and a call's delivery log read from its workflow's history (each attempt of the
``post_call_webhook`` activity: when, the receiver's status or the failure)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from ringflow.api import keys
from ringflow.api.auth import require
from ringflow.api.idempotency import IdempotencyKey, once
from ringflow.api.models import DeliveryAttempt, WebhookEndpoint, WebhookTest
from ringflow.api.problems import PROBLEM_RESPONSES
from ringflow.api.temporal import call_problem, temporal

router = APIRouter(tags=["webhooks"], responses=PROBLEM_RESPONSES)
EVENTS = ["call.ended"]
ACTIVITY = "post_call_webhook"


@router.get("/v1/webhooks", response_model=list[WebhookEndpoint], summary="Webhook endpoints")
async def endpoints(request: Request, _: keys.KeyInfo = Depends(require("webhooks:read"))) -> Any:
    """The endpoint ``RINGFLOW_WEBHOOK_URL`` names (none when unset), the events sent to it."""
    settings = request.app.state.settings
    if not settings.webhook_url:
        return []
    host = urlsplit(settings.webhook_url).hostname or "?"
    return [WebhookEndpoint(host=host, events=EVENTS, signed=settings.webhook_secret is not None)]


@router.post("/v1/webhooks/test", response_model=WebhookTest, summary="Send a test delivery")
async def test_delivery(
    request: Request,
    key: keys.KeyInfo = Depends(require("webhooks:write")),
    idempotency_key: str | None = IdempotencyKey,
) -> JSONResponse:
    """A ``webhook.test`` event with a sample call record, signed as real deliveries are."""
    from temporalio.exceptions import ApplicationError

    from ringflow.activities.webhook import WebhookSender
    from ringflow.contract.records import CallRecord, WebhookDelivery

    settings = request.app.state.settings

    async def make() -> tuple[int, Any]:
        now = datetime.now(UTC)
        record = CallRecord(
            call_id="webhook-test",
            workflow_id="call-webhook-test",
            flow="webhook_test",
            status="ended",
            started_at=now,
            updated_at=now,
        )
        delivery = WebhookDelivery(record=record, run_id="test", event="webhook.test", sent_at=now)
        sender = WebhookSender(settings.webhook_url, settings.webhook_secret)
        try:
            got = await sender.post_call_webhook(delivery)
        except ApplicationError as exc:
            return 200, WebhookTest(outcome="failed", detail=exc.message).model_dump(mode="json")
        if got.get("status") == "skipped":
            return 200, WebhookTest(outcome="skipped", detail=got.get("reason")).model_dump(mode="json")
        answer = WebhookTest(
            outcome="delivered", delivery_id=got.get("delivery_id"), http_status=got.get("http_status")
        )
        return 200, answer.model_dump(mode="json")

    return await once(request, key, idempotency_key, {}, make)


@router.get(
    "/v1/calls/{call_id}/webhooks",
    response_model=list[DeliveryAttempt],
    summary="A call's webhook deliveries",
)
async def deliveries(
    request: Request, call_id: str, _: keys.KeyInfo = Depends(require("webhooks:read"))
) -> Any:
    """Every delivery of the call's events, an attempt per row, from its workflow's history."""
    from temporalio.api.enums.v1 import EventType
    from temporalio.service import RPCError

    from ringflow.api.calls import call_id_of
    from ringflow.workflows.client import CallHandle

    client = await temporal(request)
    handle = CallHandle(client, call_id_of(call_id)).handle
    scheduled: dict[int, dict[str, Any]] = {}
    rows: list[dict[str, Any]] = []
    try:
        async for ev in handle.fetch_history_events():
            at = ev.event_time.ToDatetime(tzinfo=UTC).isoformat()
            if ev.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                attrs = ev.activity_task_scheduled_event_attributes
                if attrs.activity_type.name == ACTIVITY:
                    scheduled[ev.event_id] = {
                        "event": "call.ended",
                        "attempt": 1,
                        "outcome": "pending",
                        "at": at,
                    }
                    rows.append(scheduled[ev.event_id])
            elif ev.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
                started = ev.activity_task_started_event_attributes
                if (row := scheduled.get(started.scheduled_event_id)) is not None:
                    row["attempt"] = started.attempt
                    if started.HasField("last_failure") and started.attempt > 1:
                        row["detail"] = await failure_message(
                            client, started.last_failure
                        )  # the attempt before
            elif ev.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
                done = ev.activity_task_completed_event_attributes
                if (row := scheduled.get(done.scheduled_event_id)) is not None:
                    result = await client.data_converter.decode(list(done.result.payloads), [dict])
                    got: dict[str, Any] = (result[0] if result else None) or {}
                    row.update(
                        outcome="skipped" if got.get("status") == "skipped" else "delivered",
                        http_status=got.get("http_status"),
                        detail=got.get("reason") or row.get("detail"),
                        at=at,
                    )
            elif ev.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED:
                failed = ev.activity_task_failed_event_attributes
                if (row := scheduled.get(failed.scheduled_event_id)) is not None:
                    row.update(outcome="failed", detail=await failure_message(client, failed.failure), at=at)
    except RPCError as exc:
        raise call_problem(call_id, exc) from None
    return [DeliveryAttempt(**r) for r in rows]


async def failure_message(client: Any, failure: Any) -> str:
    """A failure's message, decrypted (the codec encodes failures' messages too)."""
    exc = await client.data_converter.decode_failure(failure)
    return str(getattr(exc, "message", None) or exc)
