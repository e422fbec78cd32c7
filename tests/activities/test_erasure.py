"""What ``call forget --phone`` finds and erases in the database (SQLite and PostgreSQL):
a person's calls by the line's numbers, however the number is written, and their campaign
contact rows, left alone while one of them is being dialled."""

from __future__ import annotations

import secrets

import pytest
from sqlalchemy import update

from ringflow.activities.campaign_store import C, Contact, add_contacts, add_dnc, engine_for, report
from ringflow.activities.erasure import calls_of_phone, erase_contacts, phone_forms
from ringflow.activities.persistence import upsert_call
from tests.activities.test_persistence import make_record

# this run's own numbers: PostgreSQL's schema holds every test's calls of the session
LINE = f"{secrets.randbelow(10**7):07d}"
NUMBER = f"+1646{LINE}"
OTHER = f"+1917{LINE}"
URI = f"sip:desk_{LINE}@pbx.example"


def test_a_number_is_looked_for_as_written_and_in_e164() -> None:
    assert phone_forms(" +1 (212) 555-0177 ") == ["+1 (212) 555-0177", "+12125550177"]
    assert phone_forms(NUMBER) == [NUMBER]
    assert phone_forms("sip:desk_1@pbx.example") == ["sip:desk_1@pbx.example"]  # not a number: as given


def test_a_persons_calls_are_found_by_the_line_s_numbers(database_url: str) -> None:
    dialled = make_record(called_number=NUMBER, variables={"name": "Ada"})
    rang_in = make_record(caller_number=NUMBER, direction="inbound")
    said_it = make_record(variables={"callback": NUMBER})
    other = make_record(called_number=OTHER)
    uri = make_record(caller_number=URI)
    look_alike = make_record(caller_number=URI.replace("_", "X"))  # "_" is no wildcard
    for r in (dialled, rang_in, said_it, other, uri, look_alike):
        upsert_call(database_url, r)
    found = calls_of_phone(database_url, f"+1 646-{LINE[:3]}-{LINE[3:]}")
    assert found == sorted([dialled.call_id, rang_in.call_id, said_it.call_id])
    assert calls_of_phone(database_url, URI) == [uri.call_id]


def test_contacts_are_erased_in_place_and_left_while_one_is_dialled(database_url: str) -> None:
    engine = engine_for(database_url)
    add_contacts(database_url, "erase-a", [Contact(phone=NUMBER, tz="UTC", variables={"first_name": "Ada"})])
    add_contacts(database_url, "erase-b", [Contact(phone=NUMBER, tz="UTC", variables={"first_name": "Ada"})])
    add_contacts(database_url, "erase-b", [Contact(phone=OTHER, tz="UTC")], start_idx=1)
    add_dnc(database_url, [NUMBER], now=1.0)
    with engine.begin() as conn:
        conn.execute(update(C).where(C.c.campaign_id == "erase-b", C.c.idx == 0).values(state="dialing"))
    held = erase_contacts(database_url, NUMBER, live=False)
    assert "campaign contacts" in held.not_erased and not held.erased  # its call is starting
    assert held.kept == {"do-not-call entry": "it is the person's objection to being called"}

    with engine.begin() as conn:
        conn.execute(update(C).where(C.c.campaign_id == "erase-b", C.c.idx == 0).values(state="reached"))
    assert "campaign contacts" in erase_contacts(database_url, NUMBER, live=True).not_erased
    done = erase_contacts(database_url, f"+1 646 {LINE}", live=False)
    assert done.erased == ["campaign contacts (2 in erase-a, erase-b): number, variables, extracted values"]
    rows = {(r["phone"], r["state"], str(r["extracted"])) for r in report(database_url, "erase-a")}
    assert rows == {("", "forgotten", "{}")}  # it was still to be called: it leaves the campaign
    b = [(r["phone"], r["state"]) for r in report(database_url, "erase-b")]
    assert b == [("", "reached"), (OTHER, "pending")]  # an outcome stays, the person goes
    assert erase_contacts(database_url, NUMBER, live=False).absent == ["campaign contacts"]


@pytest.fixture(autouse=True)
def _fresh_campaigns(database_url: str) -> None:
    """PostgreSQL's schema outlives a test: these campaigns start empty."""
    from sqlalchemy import delete

    from ringflow.activities.campaign_store import D

    with engine_for(database_url).begin() as conn:
        conn.execute(delete(C).where(C.c.campaign_id.in_(["erase-a", "erase-b"])))
        conn.execute(delete(D).where(D.c.phone == NUMBER))
