"""Job groups in the workflow: the ways a group is cancelled (the caller talking over the
bot, leaving the node, the LLM), each ending every running job 'cancelled' once, and a
cancel the group does not allow changing nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aiohttp import web
from temporalio.client import Client

from ringflow.callflow.loader import load_flow
from ringflow.contract.updates import CallFunctionRequest, CallFunctionResult, CancelRequest, RouteRequest
from ringflow.workflows.client import CallHandle, start_call
from tests.support.paths import TESTS
from tests.support.wfkit import Agent, running_worker, wait_until

FIXTURE = TESTS / "fixtures" / "jobs_wf"


async def _start_group(call: CallHandle, name: str, n: int) -> str:
    out = await call.call_function(CallFunctionRequest(event_id=f"t{n}:1:fn:{name}", node="start", name=name))
    assert out.result["status"] == "started", out
    return str(out.result["group_id"])


async def _done(call: CallHandle, gid: str) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        log = await call.handle.query("jobs_feed", 0)
        ends = [e for e in log["envelopes"] if e["type"] == "group_completed" and e["group_id"] == gid]
        return ends[0] if ends else None

    return await wait_until(check, timeout=30, what=f"group {gid} to end")


async def _cancel(call: CallHandle, reason: str) -> dict[str, Any]:
    out: dict[str, Any] = await call.handle.execute_update(
        "cancel_jobs",
        CancelRequest(reason=reason),
        result_type=dict,  # type: ignore[arg-type]
    )
    return out


async def test_each_way_of_cancelling_a_group(
    temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    async with running_worker(temporal_client, task_queue, sqlite_url, flows_dir=str(FIXTURE)):
        call = await start_call(
            temporal_client, load_flow(FIXTURE / "flow.yaml"), task_queue=task_queue, agent_timeout_s=600
        )
        lookup = await _start_group(call, "lookup", 1)
        watch = await _start_group(call, "watch", 2)
        slow = await _start_group(call, "slow", 3)

        # the LLM may not cancel 'lookup' (cancellable: false): only 'slow' and 'watch'
        # are cancellable; the caller barging in cancels 'lookup' alone
        async def answered() -> bool:
            log = await call.handle.query("jobs_feed", 0)
            return any(e.get("job") == "done_job" for e in log["envelopes"] if e["type"] == "job_completed")

        await wait_until(answered, timeout=30, what="done_job to answer")
        barged = await _cancel(call, "interruption")
        assert barged == {"status": "cancelled", "groups": {lookup: "cancelled"}}
        ended = await _done(call, lookup)
        assert ended["jobs"] == {"wait_job": "cancelled", "done_job": "completed"}
        # leaving the node cancels 'watch' (cancel_on_leave), not 'slow'
        agent = Agent(call)
        await agent.transition("start", "move_on")
        ended = await _done(call, watch)
        assert ended["outcome"] == "cancelled" and ended["jobs"] == {"wait_job": "cancelled"}
        feed = await call.handle.query("jobs_feed", -1)
        assert feed["running"] == [slow] and feed["cancellable"] == [slow]
        called_off = await _cancel(call, "llm")
        assert called_off == {"status": "cancelled", "groups": {slow: "cancelled"}}
        assert (await _cancel(call, "llm"))["status"] == "nothing to cancel"
        log = await call.handle.query("jobs_feed", 0)
        ends = [(e["group_id"], e["job"]) for e in log["envelopes"] if e["type"] == "job_completed"]
        assert len(ends) == len(set(ends)) == 4  # every job ended once
        await call.hangup()
        record = await call.handle.result()
        assert record.path == ["start", "later"]


HTTP_FLOW = """
flow: http-jobs
nodes:
  start:
    task: Help the caller.
    functions:
      - name: quote
        description: Price the item in the background.
        parameters: {type: object, properties: {sku: {type: string}}, required: [sku]}
        jobs:
          run:
            - {name: price, http: {url: "http://127.0.0.1:PORT/price/{{sku}}"}}
            - {name: gone, http: {url: "http://127.0.0.1:PORT/gone"}, retry: {max_attempts: 1}}
        transition_to: {field: outcome, cases: {partial: done}}
  done:
    type: end
    task: Say goodbye.
"""


async def test_http_jobs_run_as_the_http_tool_with_the_jobs_key(
    temporal_client: Client, task_queue: str, sqlite_url: str, tmp_path: Path
) -> None:
    keys: list[str | None] = []

    async def price(request: web.Request) -> web.Response:
        keys.append(request.headers.get("Idempotency-Key"))
        return web.json_response({"sku": request.match_info["sku"], "price": 12})

    async def gone(_request: web.Request) -> web.Response:
        return web.json_response({"error": "no such thing"}, status=404)

    app = web.Application()
    app.router.add_get("/price/{sku}", price)
    app.router.add_get("/gone", gone)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    flow = tmp_path / "flow.yaml"
    flow.write_text(HTTP_FLOW.replace("PORT", str(port)))
    try:
        async with running_worker(temporal_client, task_queue, sqlite_url):
            call = await start_call(
                temporal_client, load_flow(flow), task_queue=task_queue, agent_timeout_s=600
            )
            out = await call.call_function(
                CallFunctionRequest(event_id="t1:1:fn:quote", node="start", name="quote", args={"sku": "A1"})
            )
            gid = out.result["group_id"]
            ended = await _done(call, gid)
            assert ended["outcome"] == "partial" and ended["jobs"] == {"price": "completed", "gone": "failed"}
            routed = await call.handle.execute_update(
                "route_jobs", RouteRequest(group_id=gid), result_type=CallFunctionResult
            )
            assert routed.node == "done" and routed.state is not None
            jobs = routed.state.state["quote"]["jobs"]
            assert jobs["price"] == {"status": "completed", "result": {"sku": "A1", "price": 12}}
            assert jobs["gone"]["status"] == "failed" and "http_error" in jobs["gone"]["error"]
            assert keys == [f"{call.call_id}:{gid}:price"]
            await call.hangup()
            await call.handle.result()
    finally:
        await runner.cleanup()
