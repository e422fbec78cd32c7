"""The LiveKit webhook receiver's Prometheus metrics, served on its own ``/metrics``.

* ``ringflow_webhooks_received_total{outcome}``: webhooks by what became of them:
  ``relayed`` (to a running call), ``ignored`` (no call's event), ``no_call`` (the call has
  ended), ``unverified`` (the signature failed: another API secret, or not LiveKit),
  ``too_large``, ``temporal_unavailable`` (LiveKit retries it). Verification failures and
  undelivered events each have an alert (infra/prometheus/ringflow-alerts.yaml).
* ``ringflow_webhook_seconds``: how long a webhook took to handle (its signal to Temporal).
"""

from __future__ import annotations

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, Counter, Histogram, generate_latest

OUTCOMES = ("relayed", "ignored", "no_call", "unverified", "too_large", "temporal_unavailable")
RECEIVED = Counter("ringflow_webhooks_received", "LiveKit webhooks received, by outcome.", ["outcome"])
SECONDS = Histogram("ringflow_webhook_seconds", "Time to handle one LiveKit webhook.")
for _outcome in OUTCOMES:  # every outcome exported from the start, at 0, so rate() sees the first
    RECEIVED.labels(_outcome)


async def metrics(_: web.Request) -> web.Response:
    return web.Response(body=generate_latest(), headers={"Content-Type": CONTENT_TYPE_LATEST})
