"""The call-ended webhook: POST the call record to the operator's endpoint, signed.

Signed as the Standard Webhooks specification says (https://www.standardwebhooks.com):
``webhook-signature: v1,<base64 HMAC-SHA256 of "{webhook-id}.{webhook-timestamp}.{body}">``.
The id and timestamp are inside the signature, so a captured delivery cannot be replayed
with a fresh timestamp, and a receiver that refuses old timestamps and ids it has seen
(the ``standardwebhooks`` package does the first) refuses a replay.

The id comes from the workflow run, never from the attempt: a receiver sees the same
``webhook-id`` on every retry and de-duplicates on it. The timestamp is the attempt's, so a
retry after an outage is not refused as stale.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
import uuid
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

import httpx
from pydantic import SecretStr
from temporalio import activity
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError

from ringflow.activities.db_work import DB_WORK
from ringflow.activities.redaction import redact_turns
from ringflow.contract.records import WebhookDelivery

SIGNATURE_HEADER = "webhook-signature"
DELIVERY_HEADER = "webhook-id"
TIMESTAMP_HEADER = "webhook-timestamp"
EVENT_HEADER = "X-Ringflow-Event"
SECRET_PREFIX = "whsec_"
TOLERANCE_S = 5 * 60  # how far from now a receiver accepts a timestamp (the spec's default)

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


def delivery_id(call_id: str, run_id: str, event: str) -> str:
    """Deterministic: the same call, run and event always give the same id."""
    return str(uuid.uuid5(_DELIVERY_NAMESPACE, f"{call_id}\x1f{run_id}\x1f{event}"))


def secret_key(secret: str) -> bytes:
    """The HMAC key: a ``whsec_<base64>`` secret (the spec's form) is decoded, any other
    secret is used as its UTF-8 bytes (give a receiver's library those bytes)."""
    if secret.startswith(SECRET_PREFIX):
        return base64.b64decode(secret[len(SECRET_PREFIX) :] + "==")
    return secret.encode()


def sign(msg_id: str, timestamp: int, body: bytes, secret: str) -> str:
    """The ``webhook-signature`` value: ``v1,<base64 HMAC-SHA256 of id.timestamp.body>``."""
    signed = f"{msg_id}.{timestamp}.".encode() + body
    digest = hmac.new(secret_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def verify_signature(
    body: bytes,
    secret: str,
    headers: Mapping[str, str],
    now: float | None = None,
    tolerance_s: float = TOLERANCE_S,
) -> bool:
    """For receivers (as the spec says): the signature covers id, timestamp and body, and
    the timestamp is within ``tolerance_s`` of now. Also remember ``webhook-id``s seen and
    refuse repeats: that stops a replay inside the tolerance."""
    lower = {k.lower(): v for k, v in headers.items()}
    msg_id, stamp, given = (lower.get(h) for h in (DELIVERY_HEADER, TIMESTAMP_HEADER, SIGNATURE_HEADER))
    if not (msg_id and stamp and given and stamp.isdigit()):
        return False
    if abs((time.time() if now is None else now) - int(stamp)) > tolerance_s:
        return False
    expected = sign(msg_id, int(stamp), body, secret)
    return any(hmac.compare_digest(expected, s) for s in given.split())


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
        database_url: str | None = None,
    ) -> None:
        self.url = url
        self.database_url = database_url
        self._secret = secret.get_secret_value() if isinstance(secret, SecretStr) else secret
        self.timeout_s = timeout_s

    def build_request(self, delivery: WebhookDelivery) -> tuple[bytes, dict[str, str]]:
        """Body and headers: the same body and id on every retry, the attempt's timestamp."""
        run_id = delivery.run_id or _current_run_id()
        body = delivery.record.model_dump_json().encode()
        msg_id = delivery_id(delivery.record.call_id, run_id, delivery.event)
        stamp = int(_attempt_time(delivery.sent_at).timestamp())
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "ringflow-webhook/1",
            DELIVERY_HEADER: msg_id,
            EVENT_HEADER: delivery.event,
            TIMESTAMP_HEADER: str(stamp),
        }
        if self._secret:
            headers[SIGNATURE_HEADER] = sign(msg_id, stamp, body, self._secret)
        return body, headers

    @activity.defn(name="post_call_webhook")
    async def post_call_webhook(self, delivery: WebhookDelivery) -> dict[str, Any]:
        if not self.url:
            return {"status": "skipped", "reason": "no webhook url configured"}
        if delivery.transcript_in_db and self.database_url:
            delivery = await DB_WORK.run(with_stored_transcript, delivery, self.database_url)
        if delivery.redact:
            redacted = delivery.record.model_copy(
                update={"transcript": redact_turns(delivery.record.transcript, delivery.record.variables)}
            )
            delivery = delivery.model_copy(update={"record": redacted})
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


def with_stored_transcript(delivery: WebhookDelivery, database_url: str) -> WebhookDelivery:
    """The delivery with the call's whole transcript, as stored, in its record."""
    from ringflow.activities.persistence import load_transcript

    items = load_transcript(delivery.record.call_id, database_url=database_url)
    record = delivery.record.model_copy(update={"transcript": [i.model_dump(mode="json") for i in items]})
    return delivery.model_copy(update={"record": record})


def _current_run_id() -> str:
    """The workflow run of the running activity: the same on every retry of it."""
    try:
        return activity.info().workflow_run_id or ""
    except RuntimeError:  # not inside an activity (a direct call, e.g. from a test)
        return ""


def _attempt_time(sent_at: datetime) -> datetime:
    """When this attempt was scheduled (``sent_at`` outside an activity, e.g. in a test)."""
    try:
        return max(activity.info().current_attempt_scheduled_time, sent_at)
    except (RuntimeError, TypeError):  # not in an activity; a naive sent_at
        return sent_at
