"""The outbox journal (issue 13): turns linger a whole heartbeat interval in the agent, and
what a dead agent held is read back from Redis, not lost.

Real parts throughout: the dev server, a worker in this process with Redis configured,
real Redis, the production agent in livekit-agents' text mode (``tests/support/agentkit.py``) with
its LLM on a scripted lane. The agent is killed as a crash would (``AgentRun.kill``: the
outbox abandoned, nothing flushed), so the turns checked here exist only in the journal.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
import pytest_asyncio
from redis.asyncio import Redis
from temporalio.client import Client

from ringflow.activities.turn_journal import TurnJournalReader
from ringflow.agents.journal import OutboxJournal
from ringflow.agents.outbox import Outbox
from ringflow.contract.events import AgentEvent, Turn, TurnsEvent
from ringflow.contract.journal import JournalRead, entries_from, journal_key
from ringflow.live_transcript import held_turns
from ringflow.simulation.scripted_llm import ScriptedLLM
from tests.support.agentkit import TIMEOUT_S, TextCall, say, text_call
from tests.support.wfkit import running_worker, wait_until

REDIS = "redis://127.0.0.1:6379/0"
USER = "I'd like a table tonight for four, by the window if you have one."
ANSWER = "Of course: four tonight, by the window. What time suits you?"
# Turns wait this long for company once journaled: far longer than any test runs, so a turn
# found in the workflow before the agent's end came there through the journal, not a send.
LINGER_S = 300.0

pytestmark = pytest.mark.timeout(300)


@pytest_asyncio.fixture
async def redis() -> AsyncIterator[Redis]:
    client = Redis.from_url(REDIS)
    yield client
    await client.aclose()


@pytest_asyncio.fixture
async def worker(temporal_client: Client, task_queue: str, sqlite_url: str) -> AsyncIterator[None]:
    """The shared ``worker``'s, with the Redis the journal lives in."""
    async with running_worker(temporal_client, task_queue, sqlite_url, redis_url=REDIS):
        yield


def journaled(redis: Redis) -> dict[str, object]:
    """``attach_agent`` options for an agent that journals and lingers ``LINGER_S``."""
    return {"journal": redis, "heartbeat_s": LINGER_S}


async def journal_texts(redis: Redis, call_id: str) -> list[str]:
    rows = await redis.xrange(journal_key(call_id))
    found = entries_from(rows, 0)
    return [t.text for ev in found.events if isinstance(ev, TurnsEvent) for t in ev.items]


async def talk_and_hold(tc: TextCall, redis: Redis) -> None:
    """The caller speaks and the agent answers; both turns are journaled and still held."""
    tc.reply(say(ANSWER))
    await tc.user(USER)
    await wait_until(lambda: _has(redis, tc.call.call_id, USER, ANSWER), TIMEOUT_S, "turns journaled")
    assert tc.controller.outbox.pending >= 2, "the turns should still linger in the outbox"
    texts = [t.text for t in await tc.call.transcript()]
    assert USER not in texts and ANSWER not in texts, "the workflow should not have the held turns yet"


async def _has(redis: Redis, call_id: str, *wanted: str) -> bool:
    got = await journal_texts(redis, call_id)
    return all(w in got for w in wanted)


@pytest_asyncio.fixture
async def tc(
    temporal_client: Client, task_queue: str, scripted_llm: ScriptedLLM, worker: None, redis: Redis
) -> AsyncIterator[TextCall]:
    """A call whose agent journals and lingers: the caller spoke, the agent answered, and both
    turns are journaled and still held in the outbox."""
    async with text_call(
        temporal_client, task_queue, scripted_llm, agent=journaled(redis), agent_timeout_s=600
    ) as t:
        await talk_and_hold(t, redis)
        yield t


async def test_an_operator_hangup_after_the_agent_died_keeps_the_turns_it_held(tc: TextCall) -> None:
    await tc.run.kill()  # a crash: the outbox's turns are never sent
    await tc.call.hangup("user_hangup")  # `ringflow call hangup`
    record = await tc.ended()
    texts = [t["text"] for t in record.transcript]
    assert texts.count(USER) == 1 and texts.count(ANSWER) == 1
    assert texts.index(USER) < texts.index(ANSWER)
    view = await tc.call.state()  # a completed workflow still answers queries
    assert any("recovered from the agent's journal" in r.reason for r in view.rejected)


async def test_a_resumed_agent_carries_on_from_its_predecessors_journal(tc: TextCall, redis: Redis) -> None:
    await tc.run.kill()
    run = await tc.attach(**journaled(redis))
    # The new agent starts from a transcript that has the dead agent's last turns.
    assert [t.text for t in run.snapshot.transcript_tail][-2:] == [USER, ANSWER]
    tc.reply(say("Seven works. See you then!"))
    await tc.user("Seven o'clock, please.")
    # the LLM was given the whole conversation, the recovered turns included
    last = tc.chats()[-1]
    contents = [str(m.get("content")) for m in last.messages]
    assert USER in contents and ANSWER in contents
    await tc.controller.on_caller_hangup()
    record = await tc.ended()
    texts = [t["text"] for t in record.transcript]
    for text in (USER, ANSWER, "Seven o'clock, please.", "Seven works. See you then!"):
        assert texts.count(text) == 1, (text, texts)
    assert texts.index(ANSWER) < texts.index("Seven o'clock, please.")
    # the call ended by the agent's own hangup: its journal is gone with it
    await wait_until(lambda: _gone(redis, tc.call.call_id), TIMEOUT_S, "journal dropped")


async def _gone(redis: Redis, call_id: str) -> bool:
    return not await redis.exists(journal_key(call_id))


async def test_call_show_lists_the_turns_the_agent_holds(tc: TextCall) -> None:
    view = await tc.call.state()
    held = await held_turns(REDIS, tc.call.call_id, view.next_seq)
    assert [(t["role"], t["text"], t["held"]) for t in held][-2:] == [
        ("user", USER, True),
        ("assistant", ANSWER, True),
    ]
    await tc.synced()  # sent: no longer held
    view = await tc.call.state()
    assert await held_turns(REDIS, tc.call.call_id, view.next_seq) == []
    assert await held_turns(None, tc.call.call_id, 0) == []  # no Redis configured


async def test_the_journal_holds_only_what_the_workflow_has_not_got(tc: TextCall, redis: Redis) -> None:
    await tc.synced()  # a flush sends the held turns: their entries are trimmed
    await wait_until(
        lambda: _length_is(redis, tc.call.call_id, 0), TIMEOUT_S, "journal trimmed after delivery"
    )
    texts = [t.text for t in await tc.call.transcript()]
    assert USER in texts and ANSWER in texts


async def _length_is(redis: Redis, call_id: str, n: int) -> bool:
    return int(await redis.xlen(journal_key(call_id))) == n


async def test_with_redis_down_turns_do_not_wait_the_long_linger() -> None:
    """A journal that cannot write is not healthy: the outbox is kicked and lingers only its
    short ``linger_s``, so a Redis outage costs signals, never turns."""
    sent: list[list[AgentEvent]] = []

    async def send(events: list[AgentEvent]) -> None:
        sent.append(events)

    dead = Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=1)
    journal = OutboxJournal(dead, f"down-{uuid.uuid4().hex[:6]}")
    outbox = Outbox(send, linger_s=0.05, journal=journal, journaled_linger_s=3600.0)
    journal.on_unhealthy = outbox.kick
    outbox.start()
    turn = TurnsEvent(event_id="t1:0:turn", seq=1, items=[Turn(role="user", text="hello")])
    outbox.put(turn)
    await wait_until(_sent(sent), TIMEOUT_S, "the turn sent without the long linger")
    assert sent[0] == [turn] and not journal.healthy and journal.failures >= 1
    await outbox.close(1.0)
    await dead.aclose()


def _sent(sent: list[list[AgentEvent]]) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return bool(sent)

    return check


async def test_reading_the_journal_skips_applied_and_unreadable_entries(redis: Redis) -> None:
    call_id = f"read-{uuid.uuid4().hex[:6]}"
    key = journal_key(call_id)
    for seq in (1, 2, 3):
        ev = TurnsEvent(event_id=f"t:{seq}:turn", seq=seq, items=[Turn(role="user", text=f"turn {seq}")])
        await redis.xadd(key, {"e": ev.model_dump_json(), "t": seq})
    await redis.xadd(key, {"e": b'{"type": "turns", "seq": "not a number"}', "t": 4})
    await redis.xadd(key, {"e": b"\xff\xfe not json", "t": 5})
    found = await TurnJournalReader(REDIS).read_turn_journal(JournalRead(call_id=call_id, next_seq=2))
    assert [getattr(e, "seq", None) for e in found.events] == [2, 3]
    assert found.unreadable == 2
    assert (
        await TurnJournalReader(None).read_turn_journal(JournalRead(call_id=call_id, next_seq=0))
    ).events == []
    await redis.delete(key)
