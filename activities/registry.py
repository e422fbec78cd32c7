"""Build the infrastructure activities from configuration, for the worker.

The worker (in ``workflows``) may not import Ringflow's settings module, so it passes the
settings object in; anything with these attributes will do.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from pydantic import SecretStr

from activities.http_tool import HttpTool
from activities.persistence import CallStore
from activities.webhook import WebhookSender


class ActivityConfig(Protocol):
    database_url: str
    webhook_url: str | None
    webhook_secret: SecretStr | None
    http_allow_private: bool
    http_max_response_bytes: int


def build_activities(config: ActivityConfig) -> list[Callable[..., Any]]:
    """``persist_call``, ``append_transcript``, ``post_call_webhook`` and ``http_tool``,
    bound to ``config``; pass the list to ``Worker(activities=...)``."""
    store = CallStore(config.database_url)
    webhook = WebhookSender(config.webhook_url, config.webhook_secret, database_url=config.database_url)
    http = HttpTool(
        allow_private=config.http_allow_private,
        max_response_bytes=config.http_max_response_bytes,
    )
    return [store.persist_call, store.append_transcript, webhook.post_call_webhook, http.http_tool]
