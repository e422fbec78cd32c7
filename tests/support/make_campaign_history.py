"""Record the campaign workflow's replay histories (``tests/histories/campaign/``).

A small campaign on a private dev server, every call a real child CallWorkflow dialed against
the LiveKit fake, with outcomes that exercise each branch (reached, busy retried, no answer,
voicemail, do-not-call mid-campaign) and ``max_history_events`` low enough that it continues
as new while calls are live; every run's history is saved as ``campaign_run<N>.json`` (the
old files go first). Payloads are not encrypted (the pydantic converter alone), so the
replay test needs no key. Re-recorded at a release, with the call histories, by
``make histories`` (see ``tests/support/make_histories.py``); alone:

    .venv/bin/python tests/support/make_campaign_history.py
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from temporalio.client import Client  # noqa: E402
from temporalio.contrib.pydantic import pydantic_data_converter  # noqa: E402

from ringflow.activities import campaign_store as store  # noqa: E402
from ringflow.activities.campaign_rules import RetryRule, parse_windows  # noqa: E402
from ringflow.activities.persistence import dispose_engines  # noqa: E402
from ringflow.agents.livekit_sip import LiveKitTelephony  # noqa: E402
from ringflow.campaigns import start_campaign  # noqa: E402
from ringflow.devstack import DevStack, free_port  # noqa: E402
from ringflow.settings import Settings  # noqa: E402
from ringflow.simulation.livekit_fake import FakeLiveKit  # noqa: E402
from ringflow.temporal_setup import register_search_attributes  # noqa: E402
from ringflow.workflows.campaign_messages import CampaignInput, Limits  # noqa: E402
from ringflow.workflows.worker import build_worker  # noqa: E402
from tests.support.campaignkit import REDIS, contacts, stand_in_agent  # noqa: E402
from tests.support.wfkit import clinic  # noqa: E402

OUT = ROOT / "tests" / "histories" / "campaign"
IDENTITY = "make-histories"  # fixed, so no host name lands in the files


async def record() -> None:
    people = [f"+1212555{9300 + i}" for i in range(24)]  # enough to continue as new mid-way
    with tempfile.TemporaryDirectory(prefix="ringflow-campaign-history-") as tmp:
        stack = DevStack(
            port=free_port(), ui_port=free_port(), data_dir=Path(tmp) / "temporal", headless=True
        )
        await stack.start()
        try:
            async with FakeLiveKit() as lk:
                phone = LiveKitTelephony(
                    lk.url, lk.api_key, lk.api_secret, agent_name="ringflow-test", trunk_id="ST_h"
                )
                lk.set_answer(people[1], "busy")
                lk.set_answer(people[2], "no_answer")
                client = await Client.connect(
                    stack.address,
                    namespace=stack.namespace,
                    identity=IDENTITY,
                    data_converter=pydantic_data_converter,
                )
                await register_search_attributes(client, stack.namespace)
                db = f"sqlite:///{Path(tmp) / 'ringflow.db'}"
                settings = Settings(database_url=db, redis_url=REDIS, http_allow_private=True)
                inp = CampaignInput(
                    campaign_id="history",
                    definition=clinic(),
                    trunk_id="ST_history",
                    limits=Limits(max_concurrent=3, cps=20, max_attempts=3),
                    windows=parse_windows(["always"]),
                    max_history_events=200,
                    retry={
                        "busy": RetryRule(count=1, delay_s=0.5),
                        "voicemail": RetryRule(count=1, delay_s=0.5),
                    },
                )
                async with (
                    build_worker(
                        client, settings, task_queue="histories", telephony=phone, identity=IDENTITY
                    ),
                    stand_in_agent(client, lk, {people[3]: "voicemail"}),
                ):
                    handle = await start_campaign(
                        client, inp, contacts(*people), database_url=db, task_queue="histories"
                    )
                    store.add_dnc(db, [people[7]], now=0)
                    await handle.result()
                OUT.mkdir(parents=True, exist_ok=True)
                for old in OUT.glob("*.json"):
                    old.unlink()
                runs = [wf async for wf in client.list_workflows("WorkflowId = 'campaign-history'")]
                for n, wf in enumerate(sorted(runs, key=lambda w: w.start_time), 1):
                    history = await client.get_workflow_handle(wf.id, run_id=wf.run_id).fetch_history()
                    path = OUT / f"campaign_run{n}.json"
                    path.write_text(history.to_json() + "\n")
                    print(f"{path.relative_to(ROOT)}: {len(history.events)} events")
        finally:
            dispose_engines()
            stack.stop()


if __name__ == "__main__":
    os.chdir(ROOT)
    asyncio.run(record())
