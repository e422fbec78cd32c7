"""HTTP API bench: what ``ringflow api`` adds to starting a call, and how many call reads a
second it serves on this machine.

Prints one JSON document (``_report.emit``). A private Temporal dev server
(``_stack.bench_stack``), a worker in this process, and the API under uvicorn on a free
port, on the same client; requests go over real HTTP (httpx, keep-alive), one at a time.

* ``api_start_call``: ``POST /v1/calls`` of a file (key check in SQLite, the flow loaded
  from its file and published, the same content being the same version, the call started
  naming it). Baseline: ``start_call`` from Python on the same client with the flow already
  loaded, what an embedding service pays; ``ratio`` is the API's cost over it.
* ``api_start_call_by_version``: the same call by ``NAME@VERSION`` (the version read from
  the store, no file parsed), against the same baseline.
* ``api_get_call``: ``GET /v1/calls/{id}`` of a live call (the workflow's ``state`` query).
  Baseline: the same query from Python. ``rps`` beside it: reads a second with 16 clients
  at once.

``RINGFLOW_BENCH_SHORT=1`` takes 20 samples of each and a 2 s read burst; the full run 200
and 10 s. Run: ``.venv/bin/python bench/api.py``.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import httpx
from _report import emit, metric
from _stack import bench_stack

from ringflow.activities import flow_store
from ringflow.api.keys import create_key
from ringflow.callflow.loader import load_flow
from ringflow.devstack import free_port
from ringflow.servers.api import serve_beside
from ringflow.settings import Settings
from ringflow.workflows.client import CallHandle, start_call
from ringflow.workflows.worker import build_worker

ROOT = Path(__file__).resolve().parent.parent
SHORT = os.environ.get("RINGFLOW_BENCH_SHORT") == "1"
N = 20 if SHORT else 200
BURST_S = 2.0 if SHORT else 10.0
FLOWS = ROOT / "examples" / "flows"
FLOW = "appointment_reminder/flow.yaml"
VARIABLES = {"patient_first_name": "Dana", "appointment_time": "Tuesday at 3 PM"}


async def main() -> None:
    async with bench_stack() as bs:
        queue = f"bench-api-{uuid.uuid4().hex[:8]}"
        db = f"sqlite:///{bs.tmp / 'ringflow.db'}"
        settings = Settings(
            database_url=db,
            task_queue=queue,
            flows_dir=str(FLOWS),
            api_rate_per_s=100_000,
            api_rate_burst=1_000_000,
            agent_timeout_s=3600,
        )
        key = create_key(db, ["calls:read", "calls:write"], "bench")[1]
        port = free_port()
        worker = build_worker(bs.client, settings, task_queue=queue)
        async with worker:
            api = await serve_beside(settings, bs.client, "127.0.0.1", port)
            definition = load_flow(FLOWS / FLOW)
            pinned = flow_store.publish_file(db, FLOWS / FLOW)[1]
            by_version = f"{pinned.name}@{pinned.version}"
            headers = {"Authorization": f"Bearer {key}"}
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", headers=headers) as http:
                api_ns: list[int] = []
                ref_ns: list[int] = []
                py_ns: list[int] = []
                ids: list[str] = []
                for _ in range(N):  # interleaved: a slow patch of the machine hits both
                    t0 = time.perf_counter_ns()
                    r = await http.post("/v1/calls", json={"flow": FLOW, "variables": VARIABLES})
                    api_ns.append(time.perf_counter_ns() - t0)
                    assert r.status_code == 201, r.text
                    ids.append(r.json()["id"])
                    t0 = time.perf_counter_ns()
                    r = await http.post("/v1/calls", json={"flow": by_version, "variables": VARIABLES})
                    ref_ns.append(time.perf_counter_ns() - t0)
                    assert r.status_code == 201 and r.json()["flow_ref"] == by_version, r.text
                    ids.append(r.json()["id"])
                    t0 = time.perf_counter_ns()
                    await start_call(bs.client, definition, task_queue=queue, variables=VARIABLES)
                    py_ns.append(time.perf_counter_ns() - t0)
                call_id = ids[0]
                handle = CallHandle(bs.client, call_id)
                await handle.state()  # the worker has picked the call up
                get_ns: list[int] = []
                query_ns: list[int] = []
                for _ in range(N):
                    t0 = time.perf_counter_ns()
                    r = await http.get(f"/v1/calls/{call_id}")
                    get_ns.append(time.perf_counter_ns() - t0)
                    assert r.status_code == 200, r.text
                    t0 = time.perf_counter_ns()
                    await handle.state()
                    query_ns.append(time.perf_counter_ns() - t0)
                done = 0
                deadline = time.monotonic() + BURST_S

                async def reader() -> None:
                    nonlocal done
                    while time.monotonic() < deadline:
                        r = await http.get(f"/v1/calls/{call_id}")
                        assert r.status_code == 200, r.text
                        done += 1

                t0 = time.perf_counter()
                await asyncio.gather(*(reader() for _ in range(16)))
                rps = done / (time.perf_counter() - t0)
            await api.stop()
            for cid in ids:
                await CallHandle(bs.client, cid).hangup()
    reads = metric("api_get_call", get_ns, query_ns, unit="ms")
    reads["rps"] = round(rps, 1)
    starts = [
        metric("api_start_call", api_ns, py_ns, unit="ms"),
        metric("api_start_call_by_version", ref_ns, py_ns, unit="ms"),
    ]
    emit("api", [*starts, reads])


if __name__ == "__main__":
    asyncio.run(main())
