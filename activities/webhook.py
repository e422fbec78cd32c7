"""The call-ended webhook: POST the call record to the operator's endpoint, signed.

Temporal retries the activity, so everything that identifies a delivery (its id, its
timestamp) comes from the input or the workflow run, never from the attempt: a receiver
sees the same ``X-Ringflow-Delivery`` on every retry and can de-duplicate on it.
"""

from __future__ import annotations

import hashlib
import hmac
import uuid
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

import httpx
from pydantic import BaseModel, SecretStr
from temporalio import activity
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError

from activities.records import CallRecord

SIGNATURE_HEADER = "X-Ringflow-Signature"
DELIVERY_HEADER = "X-Ringflow-Delivery"
TIMESTAMP_HEADER = "X-Ringflow-Timestamp"
EVENT_HEADER = "X-Ringflow-Event"

# Error types, so a workflow can tell a refused delivery from an unreachable receiver.
WEBHOOK_REJECTED = "WebhookRejected"
WEBHOOK_FAILED = "WebhookFailed"

WEBHOOK_RETRY_POLICY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=30),
    maximum_attempts=5,
    non_retryable_error_types=[WEBHOOK_REJECTED],
)
_RETRYABLE_4XX = frozenset({408, 429})
_MAX_RETRY_AFTER_S = 60.0
_DELIVERY_NAMESPACE = uuid.UUID("6f1d0c2e-5b7a-4d59-9c3e-0f3a1b2c4d5e")


class WebhookDelivery(BaseModel):
    """Input of ``post_call_webhook``. The workflow fills ``run_id`` from
    ``workflow.info().run_id`` and ``sent_at`` from ``workflow.now()``."""

    record: CallRecord
    run_id: str = ""
    event: str = "call.ended"
    sent_at: datetime


def delivery_id(call_id: str, run_id: str, event: str) -> str:
    """Deterministic: the same call, run and event always give the same id."""
    return str(uuid.uuid5(_DELIVERY_NAMESPACE, f"{call_id}\x1f{run_id}\x1f{event}"))


def sign(body: bytes, secret: str) -> str:
    """``sha256=<hex HMAC-SHA256 of the raw body>``, the value of X-Ringflow-Signature."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def verify_signature(body: bytes, secret: str, header: str | None) -> bool:
    """For receivers: constant-time check of an X-Ringflow-Signature header."""
    return header is not None and hmac.compare_digest(sign(body, secret), header)


def _retry_after(response: httpx.Response) -> timedelta | None:
    value = response.headers.get("retry-after", "")
    try:
        seconds = float(value)
    except ValueError:
        return None
    return timedelta(seconds=min(max(seconds, 0.0), _MAX_RETRY_AFTER_S))


class WebhookSender:
    """The webhook activity, bound to the operator's endpoint and secret.

    With no URL configured the activity succeeds without sending, so workflows can
    always call it.
    """

    def __init__(
        self,
        url: str | None,
        secret: str | SecretStr | None = None,
        *,
        timeout_s: float = 10.0,
    ) -> None:
        self.url = url
        self._secret = secret.get_secret_value() if isinstance(secret, SecretStr) else secret
        self.timeout_s = timeout_s

    def build_request(self, delivery: WebhookDelivery) -> tuple[bytes, dict[str, str]]:
        """Body and headers; a pure function of the input (hence identical on retries)."""
        run_id = delivery.run_id or _current_run_id()
        body = delivery.record.model_dump_json().encode()
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "ringflow-webhook/1",
            DELIVERY_HEADER: delivery_id(delivery.record.call_id, run_id, delivery.event),
            EVENT_HEADER: delivery.event,
            TIMESTAMP_HEADER: str(int(delivery.sent_at.timestamp())),
        }
        if self._secret:
            headers[SIGNATURE_HEADER] = sign(body, self._secret)
        return body, headers

    @activity.defn(name="post_call_webhook")
    async def post_call_webhook(self, delivery: WebhookDelivery) -> dict[str, Any]:
        if not self.url:
            return {"status": "skipped", "reason": "no webhook url configured"}
        body, headers = self.build_request(delivery)
        # Only the host goes into errors and logs: the URL's path or query may hold a token.
        host = urlsplit(self.url).hostname or "?"
        try:
            async with httpx.AsyncClient(timeout=self.timeout_s, trust_env=False) as client:
                response = await client.post(self.url, content=body, headers=headers)
        except httpx.HTTPError as err:
            raise ApplicationError(
                f"webhook to {host} failed: {type(err).__name__}", type=WEBHOOK_FAILED
            ) from None
        status = response.status_code
        if 200 <= status < 300:
            return {"status": "delivered", "delivery_id": headers[DELIVERY_HEADER], "http_status": status}
        if status >= 500 or status in _RETRYABLE_4XX:
            raise ApplicationError(
                f"webhook to {host} answered {status}",
                type=WEBHOOK_FAILED,
                next_retry_delay=_retry_after(response) if status == 429 else None,
            )
        raise ApplicationError(
            f"webhook to {host} refused the delivery with {status}",
            type=WEBHOOK_REJECTED,
            non_retryable=True,
        )


def _current_run_id() -> str:
    """The workflow run of the running activity: the same on every retry of it."""
    try:
        return activity.info().workflow_run_id or ""
    except RuntimeError:  # not inside an activity (a direct call, e.g. from a test)
        return ""
