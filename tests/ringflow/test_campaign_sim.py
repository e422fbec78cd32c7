"""``ringflow campaign simulate``'s engine: the real workflows, the LiveKit fake answering as a
seeded draw says, a scripted callee; the outcome follows the rules for every contact."""

from __future__ import annotations

from collections import Counter

from ringflow.activities import campaign_store as store
from ringflow.activities.campaign_rules import parse_retry, parse_windows
from ringflow.simulation.campaign import draw, parse_answers, simulate_campaign
from ringflow.workflows.campaign_messages import CampaignInput, Limits
from tests.support.campaignkit import REDIS, contacts, new_id
from tests.support.wfkit import clinic


async def test_a_simulated_campaign_follows_the_rules_for_every_contact(
    temporal_server: object, sqlite_url: str
) -> None:
    people = contacts(*[f"+1212555{8000 + i}" for i in range(16)])
    answers = parse_answers("human=0.4,no_answer=0.3,busy=0.1,voicemail=0.2")
    inp = CampaignInput(
        campaign_id=new_id("sim"),
        definition=clinic(),
        trunk_id=new_id("T"),
        limits=Limits(max_concurrent=4, cps=20, max_attempts=3),
        windows=parse_windows(["always"]),
        retry=dict([parse_retry("no_answer=1/2h"), parse_retry("voicemail=1/4h")]),
        time_scale=36000,
    )
    seen: list[dict[str, int]] = []
    out = await simulate_campaign(
        inp,
        people,
        answers,
        seed=7,
        redis_url=REDIS,
        address=temporal_server.address,
        database_url=sqlite_url,
        on_progress=seen.append,  # campaign simulate's progress line
    )  # type: ignore[attr-defined]
    kinds = draw([c.phone for c in people], answers, 7)
    expected = {
        "human": (1, "reached"),
        "no_answer": (2, "failed"),
        "voicemail": (2, "failed"),
        "busy": (1, "failed"),
    }
    rows = {r["phone"]: r for r in store.report(sqlite_url, inp.campaign_id)}
    got = {p: (rows[p]["attempts"], rows[p]["state"]) for p in kinds}
    assert got == {p: expected[k] for p, k in kinds.items()}
    assert out["status"] == "finished" and out["double_dials"] == 0 and out["out_of_window"] == 0
    assert out["max_concurrent_seen"] <= 4
    assert out["dials"] == sum(expected[k][0] for k in kinds.values()) == len(out["dial_times"])
    assert Counter(out["answers_drawn"]) == Counter(kinds.values())
    # the progress seen ends on every contact in its final state, never counting one twice
    assert seen and seen[-1] == Counter(state for _, state in got.values())
    assert all(sum(states.values()) == len(people) for states in seen)
