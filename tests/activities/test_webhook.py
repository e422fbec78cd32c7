"""The call-ended webhook: signed, stable delivery ids, retried through a real worker."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from temporalio import workflow
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment
from temporalio.worker import Worker

from ringflow.activities.webhook import (
    DELIVERY_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    WEBHOOK_FAILED,
    WEBHOOK_REJECTED,
    WEBHOOK_RETRY_POLICY,
    WebhookDelivery,
    WebhookSender,
    delivery_id,
    sign,
    verify_signature,
)
from ringflow.contract.records import CallRecord
from tests.support.loopback import Receiver

SECRET = "whsec-test"
SENT_AT = datetime(2025, 3, 1, 12, 5, tzinfo=UTC)


def make_record() -> CallRecord:
    now = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
    return CallRecord(
        call_id=f"call-{uuid.uuid4().hex[:8]}",
        workflow_id="call/x",
        flow="demo",
        status="ended",
        disposition="booked",
        started_at=now,
        ended_at=now + timedelta(minutes=5),
        updated_at=now + timedelta(minutes=5),
    )


@workflow.defn(sandboxed=False)
class WebhookOnlyWorkflow:
    """The smallest workflow that sends the webhook the way the call workflow does."""

    @workflow.run
    async def run(self, record: CallRecord) -> dict[str, Any]:
        delivery = WebhookDelivery(record=record, run_id=workflow.info().run_id, sent_at=workflow.now())
        return await workflow.execute_activity(
            "post_call_webhook",
            delivery,
            result_type=dict,
            start_to_close_timeout=timedelta(seconds=10),
            retry_policy=WEBHOOK_RETRY_POLICY,
        )


async def test_failed_deliveries_are_retried_with_one_delivery_id(
    temporal_client: Client, task_queue: str, receiver: Receiver
) -> None:
    receiver.script = [500, 503]
    sender = WebhookSender(receiver.url, SECRET)
    record = make_record()
    async with Worker(
        temporal_client,
        task_queue=task_queue,
        workflows=[WebhookOnlyWorkflow],
        activities=[sender.post_call_webhook],
    ):
        handle = await temporal_client.start_workflow(
            WebhookOnlyWorkflow.run, record, id=f"wh-{record.call_id}", task_queue=task_queue
        )
        result = await asyncio.wait_for(handle.result(), timeout=60)

    assert len(receiver.deliveries) == 3
    run_id = handle.result_run_id
    assert run_id
    expected_id = delivery_id(record.call_id, run_id, "call.ended")
    assert result == {"status": "delivered", "delivery_id": expected_id, "http_status": 200}
    for headers, body in receiver.deliveries:
        assert headers[DELIVERY_HEADER] == expected_id
        assert verify_signature(body, SECRET, headers)  # each attempt signs its own timestamp
        assert CallRecord.model_validate_json(body) == record
    assert len({b for _, b in receiver.deliveries}) == 1


async def test_client_error_is_not_retried(receiver: Receiver) -> None:
    receiver.script = [400]
    sender = WebhookSender(receiver.url, SECRET)
    delivery = WebhookDelivery(record=make_record(), run_id="r1", sent_at=SENT_AT)
    with pytest.raises(ApplicationError) as caught:
        await ActivityEnvironment().run(sender.post_call_webhook, delivery)
    assert caught.value.type == WEBHOOK_REJECTED
    assert caught.value.non_retryable
    assert WEBHOOK_REJECTED in WEBHOOK_RETRY_POLICY.non_retryable_error_types  # type: ignore[operator]


@pytest.mark.parametrize("status", [408, 429, 500, 502])
async def test_timeouts_throttling_and_server_errors_are_retryable(receiver: Receiver, status: int) -> None:
    receiver.script = [status]
    receiver.retry_after = "7"
    sender = WebhookSender(receiver.url, SECRET)
    delivery = WebhookDelivery(record=make_record(), run_id="r1", sent_at=SENT_AT)
    with pytest.raises(ApplicationError) as caught:
        await ActivityEnvironment().run(sender.post_call_webhook, delivery)
    assert caught.value.type == WEBHOOK_FAILED
    assert not caught.value.non_retryable
    expected_delay = timedelta(seconds=7) if status == 429 else None
    assert caught.value.next_retry_delay == expected_delay


async def test_unreachable_receiver_is_retryable(unused_tcp_port: int) -> None:
    sender = WebhookSender(f"http://127.0.0.1:{unused_tcp_port}/hook?token=secret", SECRET)
    delivery = WebhookDelivery(record=make_record(), run_id="r1", sent_at=SENT_AT)
    with pytest.raises(ApplicationError) as caught:
        await ActivityEnvironment().run(sender.post_call_webhook, delivery)
    assert caught.value.type == WEBHOOK_FAILED and not caught.value.non_retryable
    assert "token" not in str(caught.value)


async def test_without_url_nothing_is_sent() -> None:
    sender = WebhookSender(None, SECRET)
    delivery = WebhookDelivery(record=make_record(), sent_at=SENT_AT)
    result = await ActivityEnvironment().run(sender.post_call_webhook, delivery)
    assert result["status"] == "skipped"


async def test_unsigned_without_secret_and_run_id_from_activity_info(receiver: Receiver) -> None:
    sender = WebhookSender(receiver.url, None)
    record = make_record()
    delivery = WebhookDelivery(record=record, sent_at=SENT_AT)  # no run_id: taken from info
    await ActivityEnvironment().run(sender.post_call_webhook, delivery)
    headers, _ = receiver.deliveries[0]
    assert SIGNATURE_HEADER not in headers
    assert headers[DELIVERY_HEADER] == delivery_id(record.call_id, "test-run", "call.ended")
    assert headers[TIMESTAMP_HEADER] == str(int(SENT_AT.timestamp()))


def test_signature_helpers() -> None:
    body = b'{"call_id":"c"}'
    now = 1_750_000_000
    header = sign("msg_1", now, body, SECRET)
    assert header.startswith("v1,")
    headers = {DELIVERY_HEADER: "msg_1", TIMESTAMP_HEADER: str(now), SIGNATURE_HEADER: header}
    assert verify_signature(body, SECRET, headers, now=now + 60)
    assert not verify_signature(body + b" ", SECRET, headers, now=now)
    assert not verify_signature(body, "other", headers, now=now)
    assert not verify_signature(body, SECRET, {**headers, DELIVERY_HEADER: "msg_2"}, now=now)
    assert not verify_signature(body, SECRET, {**headers, TIMESTAMP_HEADER: str(now + 1)}, now=now)
    assert not verify_signature(body, SECRET, headers, now=now + 301)  # too old
    assert not verify_signature(body, SECRET, {}, now=now)
