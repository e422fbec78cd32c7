"""The worker's probe endpoints: liveness follows the event loop, readiness the worker."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.error
import urllib.request

from ringflow.servers.health import HealthServer
from tests.support.wfkit import wait_until


def _get(port: int, path: str) -> tuple[int, dict[str, object]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


async def test_livez_fails_while_the_event_loop_is_stuck_and_recovers() -> None:
    health = HealthServer("127.0.0.1", 0, lambda: True, stale_after_s=0.3, tick_s=0.05)
    await health.start()
    try:
        assert _get(health.port, "/livez")[0] == 200
        # Block this loop the way a CPU-bound or sync call in async code would, and probe
        # from another thread meanwhile, as the kubelet does.
        # The loop stays stuck until the probe has seen it fail (or a minute went by): how
        # long the prober takes to get a turn on a loaded machine does not matter.
        seen = threading.Event()
        probe = asyncio.get_running_loop().run_in_executor(None, _probe_after_stall, health.port, seen)
        seen.wait(60)  # the stuck loop under test
        (status, body), ready = await probe
        assert status == 503 and body["alive"] is False
        assert ready == 503  # a stuck worker is not ready either

        async def alive_again() -> bool:
            return (await asyncio.to_thread(_get, health.port, "/livez"))[0] == 200

        await wait_until(alive_again, timeout=60, what="livez 200 again")
    finally:
        health.stop()


def _probe_after_stall(port: int, seen: threading.Event) -> tuple[tuple[int, dict[str, object]], int]:
    """Probe until liveness fails (the loop is then stuck), and readiness right after;
    then ``seen`` lets the loop go."""
    try:
        deadline = time.monotonic() + 60
        live = _get(port, "/livez")
        while live[0] != 503 and time.monotonic() < deadline:
            time.sleep(0.02)  # a probe's period
            live = _get(port, "/livez")
        return live, _get(port, "/readyz")[0]
    finally:
        seen.set()


async def test_readyz_follows_the_ready_check_and_unknown_paths_are_404() -> None:
    state = {"ready": False}
    health = HealthServer("127.0.0.1", 0, lambda: state["ready"])
    await health.start()
    try:
        assert await asyncio.to_thread(_get, health.port, "/readyz") == (503, {"ready": False})
        state["ready"] = True
        assert await asyncio.to_thread(_get, health.port, "/readyz") == (200, {"ready": True})
        try:
            url = f"http://127.0.0.1:{health.port}/metrics"
            await asyncio.to_thread(urllib.request.urlopen, url, None, 5)
            raise AssertionError("/metrics answered")
        except urllib.error.HTTPError as err:
            assert err.code == 404
        with urllib.request.urlopen(f"http://127.0.0.1:{health.port}/livez", timeout=5) as resp:
            assert resp.headers["Content-Type"] == "application/json"
    finally:
        health.stop()


async def test_livez_fails_while_stuck_names_a_reason() -> None:
    """The worker's check (``database_stuck``): database work waiting too long is not alive."""
    reason: list[str] = []
    health = HealthServer("127.0.0.1", 0, lambda: True, stuck=lambda: reason[0] if reason else None)
    await health.start()
    try:
        assert _get(health.port, "/livez")[0] == 200
        reason.append("a database call has waited 200 s")
        status, body = await asyncio.to_thread(_get, health.port, "/livez")
        assert status == 503 and body["stuck"] == "a database call has waited 200 s"
    finally:
        health.stop()
