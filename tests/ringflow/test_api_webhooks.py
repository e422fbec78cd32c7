"""``/v1/webhooks`` and a call's delivery log against a real worker and a local receiver: a
call whose first delivery got a 503 shows both attempts, the second delivered."""

from __future__ import annotations

from temporalio.client import Client

from tests.support.apikit import api_client, api_settings, new_key
from tests.support.loopback import Receiver
from tests.support.wfkit import running_worker, start, wait_until


async def test_endpoints_test_delivery_and_a_calls_delivery_log(
    temporal_client: Client, task_queue: str, sqlite_url: str, receiver: Receiver
) -> None:
    receiver.script = [503]  # the first delivery fails, its retry lands
    settings = api_settings(
        sqlite_url, task_queue, webhook_url=receiver.url, webhook_secret="whsec_dGVzdHNlY3JldA=="
    )
    key = new_key(sqlite_url, "webhooks:read", "webhooks:write")
    async with (
        running_worker(temporal_client, task_queue, sqlite_url, webhook_url=receiver.url),
        api_client(settings, temporal_client, key) as http,
    ):
        call = await start(temporal_client, task_queue)
        await call.hangup()
        await wait_until(call.handle.result, what="the call's record")
        await receiver.wait_for(2)

        async def logged() -> list[dict[str, object]] | None:
            rows = (await http.get(f"/v1/calls/{call.call_id}/webhooks")).json()
            return rows if rows and rows[-1]["outcome"] != "pending" else None

        log = await wait_until(logged, what="the delivery's outcome")
        listed = (await http.get("/v1/webhooks")).json()
        tested = await http.post("/v1/webhooks/test")
        missing = await http.get("/v1/calls/nosuch/webhooks")
    assert listed == [{"host": "127.0.0.1", "events": ["call.ended"], "signed": True}]
    assert [(r["event"], r["attempt"], r["outcome"], r["http_status"]) for r in log] == [
        ("call.ended", 2, "delivered", 200)
    ]
    assert "503" in log[0]["detail"]  # why the first attempt failed
    assert tested.status_code == 200 and tested.json()["outcome"] == "delivered", tested.text
    headers, _ = receiver.deliveries[-1]
    assert headers["X-Ringflow-Event"] == "webhook.test" and headers["webhook-signature"].startswith("v1,")
    assert missing.status_code == 404
