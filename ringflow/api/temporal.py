"""The API's one Temporal client, connected on first use and shared by every request."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from fastapi import Request

from ringflow.api.problems import ProblemError, field

if TYPE_CHECKING:
    from temporalio.client import Client


async def temporal(request: Request) -> Client:
    return await connected(request.app.state)


async def connected(state: Any) -> Client:
    """The app's client (``state``: the FastAPI app's state), connecting it the first time."""
    if state.client is not None:
        return state.client
    async with state.client_lock:
        if state.client is None:
            from temporalio.service import RPCError

            from ringflow.temporal_setup import connect

            settings = state.settings
            try:
                state.client = await asyncio.wait_for(
                    connect(settings.temporal_address, settings.temporal_namespace), 10
                )
            except (RPCError, RuntimeError, TimeoutError, OSError) as exc:
                raise ProblemError(
                    503, f"cannot reach Temporal at {settings.temporal_address}: {exc or 'timed out'}"
                ) from None
    return state.client


def call_problem(call_id: str, exc: Exception) -> ProblemError:
    """What a Temporal error reading a call's workflow means to a client: no such call (404),
    or Temporal could not answer (503)."""
    from temporalio.service import RPCError, RPCStatusCode

    if isinstance(exc, RPCError) and exc.status == RPCStatusCode.NOT_FOUND:
        return ProblemError(404, f"no call '{call_id}'", errors=[field("path.call_id", "no such call")])
    return ProblemError(503, f"call {call_id}: {getattr(exc, 'message', exc)}")
