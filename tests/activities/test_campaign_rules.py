"""Calling windows, retry rules and contact timezones; the claim's window and do-not-call
decisions on a real database (SQLite and PostgreSQL), at explicit times."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

import pytest

from ringflow.activities import campaign_store as store
from ringflow.activities.campaign_rules import (
    RuleError,
    in_window,
    normalize_phone,
    parse_retry,
    parse_windows,
    timezone_for,
    window_open_at,
)
from tests.support.campaignkit import new_id

WEEKDAYS = parse_windows(["Mon-Fri 09:00-12:00,13:00-20:00"])


def utc(*a: int) -> datetime:
    return datetime(*a, tzinfo=UTC)


def test_a_window_is_in_the_contacts_local_time() -> None:
    now = utc(2026, 6, 3, 14, 0)  # a Wednesday: 10:00 in New York, 07:00 in Los Angeles, 16:00 in Paris
    assert in_window(WEEKDAYS, "America/New_York", now)
    assert not in_window(WEEKDAYS, "America/Los_Angeles", now)
    assert window_open_at(WEEKDAYS, "America/Los_Angeles", now) == utc(2026, 6, 3, 16, 0)
    assert in_window(WEEKDAYS, "Europe/Paris", now)
    assert window_open_at(WEEKDAYS, "Asia/Tokyo", now) == utc(2026, 6, 4, 0, 0)  # Thu 09:00 JST


def test_the_lunch_gap_weekend_and_skip_dates_wait_for_the_next_opening() -> None:
    assert window_open_at(WEEKDAYS, "UTC", utc(2026, 6, 3, 12, 30)) == utc(2026, 6, 3, 13, 0)
    assert window_open_at(WEEKDAYS, "UTC", utc(2026, 6, 5, 20, 0)) == utc(2026, 6, 8, 9, 0)  # Fri -> Mon
    holiday = parse_windows(["Mon-Fri 09:00-20:00"], ["2026-06-08"])
    assert window_open_at(holiday, "UTC", utc(2026, 6, 6, 10, 0)) == utc(2026, 6, 9, 9, 0)


def test_a_window_opens_at_the_same_wall_clock_time_across_a_daylight_saving_change() -> None:
    w = parse_windows(["Daily 09:00-20:00"])
    # New York springs forward on Sunday 2026-03-08: 09:00 is 14:00 UTC before, 13:00 UTC after
    assert window_open_at(w, "America/New_York", utc(2026, 3, 7, 2, 0)) == utc(2026, 3, 7, 14, 0)
    assert window_open_at(w, "America/New_York", utc(2026, 3, 8, 2, 0)) == utc(2026, 3, 8, 13, 0)
    assert not in_window(w, "America/New_York", utc(2026, 3, 8, 1, 30))  # 20:30 local the evening before
    # Europe falls back on 2026-10-25: 20:00 local is 19:00 UTC on that day, 18:00 UTC the day before
    assert in_window(w, "Europe/Berlin", utc(2026, 10, 25, 18, 30))
    assert not in_window(w, "Europe/Berlin", utc(2026, 10, 24, 18, 30))


def test_rules_and_numbers_refuse_bad_input_with_a_clear_message() -> None:
    assert parse_retry("no_answer=3/2h")[1].model_dump() == {"count": 3, "delay_s": 7200.0}
    with pytest.raises(RuleError, match="OUTCOME one of"):
        parse_retry("hungup=3/2h")
    with pytest.raises(RuleError, match="30m or 2h"):
        parse_retry("busy=2/soon")
    with pytest.raises(RuleError, match="HH:MM-HH:MM"):
        parse_windows(["Mon-Fri 9-5"])
    with pytest.raises(RuleError, match=r"Mon\.\.Sun"):
        parse_windows(["Weekdays 09:00-17:00"])
    with pytest.raises(RuleError, match="start before it ends"):
        parse_windows(["Mon 20:00-09:00"])
    with pytest.raises(RuleError, match=r"E\.164"):
        normalize_phone("2125550101")
    assert normalize_phone("+1 212 555 0101") == "+12125550101"
    with pytest.raises(RuleError, match="has letters"):  # phonenumbers would dial +12125552255
        normalize_phone("+1212555CALL")
    assert timezone_for("+12125550101") == "America/New_York"
    assert timezone_for("+33142685300") == "Europe/Paris"


def test_a_claim_moves_contacts_outside_their_window_and_closes_do_not_call_ones(database_url: str) -> None:
    # The do-not-call list is global in a database the session's tests share: numbers only this
    # test uses, so no other test finds them barred whatever order the tests run in.
    cid = new_id()
    people = [
        store.Contact(phone="+12125550981", tz="America/New_York"),
        store.Contact(phone="+13105550982", tz="America/Los_Angeles"),
        store.Contact(phone="+12125550983", tz="America/New_York"),
    ]
    store.add_contacts(database_url, cid, people, now=0)
    store.add_dnc(database_url, ["+12125550983"], now=0)
    now = utc(2026, 6, 3, 14, 0).timestamp()
    res = store.claim(database_url, cid, "claim-0", 10, WEEKDAYS, 3, now)
    assert [c.phone for c in res.claimed] == ["+12125550981"] and res.out_of_window == 1
    assert res.next_due == utc(2026, 6, 3, 16, 0).timestamp()  # LA opens at 09:00 PDT
    again = store.claim(database_url, cid, "claim-0", 10, WEEKDAYS, 3, now + 5)  # a retried activity
    assert [(c.idx, c.attempt) for c in again.claimed] == [(0, 1)]
    assert again.claimed == res.claimed  # the same answer, the contact's timezone included
    assert again.claimed[0].tz == "America/New_York"
    states = {r["phone"]: r["state"] for r in store.report(database_url, cid)}
    assert states == {"+12125550981": "dialing", "+13105550982": "pending", "+12125550983": "dnc"}
    # the do-not-call list is read again right before the dial
    store.add_dnc(database_url, ["+12125550981"], now=now)
    assert store.predial(database_url, cid, 0, 1, WEEKDAYS, now + 1) == "dnc"
    assert store.predial(database_url, cid, 0, 1, WEEKDAYS, now + 2) == "skipped"  # decided once


def test_a_retry_due_outside_the_window_waits_for_the_next_opening(database_url: str) -> None:
    cid = new_id()
    store.add_contacts(database_url, cid, [store.Contact(phone="+12125550199", tz="America/New_York")], now=0)
    friday_evening = utc(2026, 6, 5, 23, 30).timestamp()  # 19:30 in New York
    (c,) = store.claim(database_url, cid, "claim-0", 1, WEEKDAYS, 3, friday_evening).claimed
    assert store.predial(database_url, cid, c.idx, c.attempt, WEEKDAYS, friday_evening) == "go"
    rule = parse_retry("no_answer=2/2h")[1]
    state, next_at = store.record_outcome(
        database_url,
        cid,
        0,
        1,
        store.Outcome(end_reason="no_answer"),
        {"no_answer": rule},
        3,
        1.0,
        friday_evening + 40,
    )
    assert state == "retry" and next_at == friday_evening + 40 + 7200  # Saturday 21:30 local
    res = store.claim(database_url, cid, "claim-1", 1, WEEKDAYS, 3, next_at)
    assert res.claimed == [] and res.next_due == utc(2026, 6, 8, 13, 0).timestamp()  # Monday 09:00 EDT
    (c2,) = store.claim(database_url, cid, "claim-2", 1, WEEKDAYS, 3, res.next_due).claimed
    assert c2.attempt == 2


def test_an_attempt_given_back_before_its_call_started_does_not_count(database_url: str) -> None:
    cid = new_id()
    store.add_contacts(database_url, cid, [store.Contact(phone="+12125550198", tz="UTC")], now=0)
    always = parse_windows(["always"])
    (c,) = store.claim(database_url, cid, "claim-0", 1, always, 1, 10.0).claimed
    assert store.predial(database_url, cid, c.idx, c.attempt, always, 11.0) == "go"
    store.release(database_url, cid, c.idx, c.attempt, 12.0)  # paused while it waited: never dialed
    store.release(database_url, cid, c.idx, c.attempt, 13.0)  # a retried activity changes nothing more
    (row,) = store.report(database_url, cid)
    assert (row["state"], row["attempts"]) == ("retry", 0)
    (again,) = store.claim(database_url, cid, "claim-1", 1, always, 1, 14.0).claimed  # max_attempts 1
    assert (again.attempt, again.call_id) == (2, f"{cid}-0-2")  # a new attempt, a new call id
    assert [(t["attempt"], t["status"]) for t in store.attempts(database_url, cid)] == [
        (1, "not_dialed"),
        (2, "claimed"),
    ]


def test_claims_running_side_by_side_never_take_the_same_contact(database_url: str) -> None:
    """A campaign keeps several rounds in flight; on PostgreSQL their claims really overlap."""
    cid = new_id()
    people = [store.Contact(phone=f"+1212555{2000 + i}", tz="UTC") for i in range(120)]
    store.add_contacts(database_url, cid, people, now=0)
    always = parse_windows(["always"])

    def claim(n: int) -> list[tuple[int, int]]:
        got: list[tuple[int, int]] = []
        for k in range(10):
            res = store.claim(database_url, cid, f"claim-{n}-{k}", 4, always, 3, 1.0)
            got += [(c.idx, c.attempt) for c in res.claimed]
        return got

    with ThreadPoolExecutor(4) as pool:
        taken = [t for part in pool.map(claim, range(4)) for t in part]
    assert len(taken) == len(set(taken)) == 120  # each contact once, all of them
    assert {(a["idx"], a["attempt"]) for a in store.attempts(database_url, cid)} == set(taken)


def test_storing_contacts_reports_each_thousand_stored(database_url: str) -> None:
    """``campaign start``'s progress line: the count after each chunk the store writes, up
    to every contact, and the rows are really there when it says so."""
    cid = new_id()
    people = [store.Contact(phone=f"+1212556{i:04d}", tz="America/New_York") for i in range(2345)]
    heard: list[tuple[int, int]] = []

    def stored(n: int) -> None:
        heard.append((n, sum(store.counts(database_url, cid)["contacts"].values())))

    assert store.add_contacts(database_url, cid, people, now=0, on_chunk=stored) == 2345
    assert heard == [(1000, 1000), (2000, 2000), (2345, 2345)]
