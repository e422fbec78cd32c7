"""``ringflow campaign ...`` as the user runs it: bad input refused before anything is stored
or started; a campaign started, watched, steered and reported against a real Temporal dev
server, Redis and SQLite, its calls dialed against the LiveKit fake."""

from __future__ import annotations

import asyncio
import csv
import io
import json
import os
from pathlib import Path

import pytest
from temporalio.client import Client
from typer.testing import CliRunner, Result

from ringflow.callflow.loader import load_flow
from ringflow.campaigns import MAX_REPORTED, ContactsError, load_contacts, load_dnc
from ringflow.cli import app
from ringflow.devstack import DevStack, free_port
from ringflow.simulation.livekit_fake import FakeLiveKit
from tests.support.campaignkit import REDIS, fake_line, new_id, stand_in_agent
from tests.support.cli_process import ringflow
from tests.support.paths import ROOT
from tests.support.wfkit import FIXTURES, running_worker

CLINIC = str(FIXTURES / "clinic.yaml")


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def use_livekit(monkeypatch: pytest.MonkeyPatch, lk: FakeLiveKit) -> None:
    """The CLI's LiveKit (what `campaign start` checks the trunk against) is the fake."""
    monkeypatch.setenv("LIVEKIT_URL", lk.url)
    monkeypatch.setenv("LIVEKIT_API_KEY", lk.api_key)
    monkeypatch.setenv("LIVEKIT_API_SECRET", lk.api_secret)


def test_bad_contacts_rules_and_a_missing_redis_are_refused_before_anything_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RINGFLOW_TEMPORAL_ADDRESS", "127.0.0.1:9")  # nothing there: never reached
    monkeypatch.setenv("RINGFLOW_ENCRYPTION", "0")
    monkeypatch.delenv("RINGFLOW_REDIS_URL", raising=False)
    good = write(tmp_path, "ok.csv", "phone,patient\n+12125550101,Sam\n")
    bad_phone = write(tmp_path, "bad.csv", "phone,patient\n+12125550101,Sam\n2125550102,Ann\n")
    bad_var = write(tmp_path, "var.jsonl", '{"phone": "+12125550101", "variables": {"patiant": "x"}}\n')
    no_tz = write(tmp_path, "tz.csv", "phone,patient\n+12125550101,Sam\n+61412345678,Ann\n")
    runner = CliRunner()

    def run(*args: str) -> Result:
        return runner.invoke(app, ["campaign", "start", *args, "--flow", CLINIC, "--trunk", "ST_1"])

    res = run(bad_phone)
    assert res.exit_code == 2 and f"{bad_phone}:3" in res.output and "E.164" in res.output
    res = run(bad_var)
    assert res.exit_code == 2 and f"{bad_var}:1" in res.output and "patiant" in res.output
    res = run(good, "--retry", "no_answer=3")
    assert res.exit_code == 2 and "COUNT/DELAY" in res.output
    res = run(good, "--window", "weekdays 9-5")
    assert res.exit_code == 2 and "window" in res.output
    res = run(no_tz, "--default-timezone", "Australia/Sydney")  # with a default: only Redis is missing
    assert res.exit_code == 2 and "RINGFLOW_REDIS_URL" in res.output
    monkeypatch.setenv("RINGFLOW_REDIS_URL", "redis://127.0.0.1:9/0")
    res = run(good)
    assert res.exit_code == 2 and "does not answer" in res.output
    res = run(no_tz)  # an Australian mobile: several timezones, none derivable from the number
    assert res.exit_code == 2 and f"{no_tz}:3" in res.output and "--default-timezone" in res.output
    assert "Traceback" not in res.output


def test_every_bad_contact_line_is_reported_in_one_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not only the first: a list with a bad phone, an unknown variable and a missing number
    names all three lines; a list with more than MAX_REPORTED bad lines names that many
    and counts the rest; the do-not-call list likewise."""
    monkeypatch.setenv("RINGFLOW_TEMPORAL_ADDRESS", "127.0.0.1:9")  # nothing there: never reached
    monkeypatch.setenv("RINGFLOW_ENCRYPTION", "0")
    definition = load_flow(CLINIC)
    mixed = write(
        tmp_path,
        "mixed.jsonl",
        '{"phone": "+12125550101", "variables": {"patient": "Sam"}}\n'
        '{"phone": "2125550102", "variables": {"patient": "Ann"}}\n'
        "not json\n"
        '{"phone": "+12125550103", "variables": {"patiant": "x"}}\n'
        '{"variables": {"patient": "Bo"}}\n',
    )
    with pytest.raises(ContactsError) as err:
        load_contacts(Path(mixed), definition)
    text = str(err.value)
    assert text.startswith(f"{mixed}: 4 bad contact lines:")
    for line, why in ((2, "E.164"), (3, "not JSON"), (4, "patiant"), (5, "no phone number")):
        assert f"{mixed}:{line}: " in text and why in text, (line, text)
    assert f"{mixed}:1:" not in text
    rows = "".join(f"55501{i:02d},Pat\n" for i in range(MAX_REPORTED + 5))
    many = write(tmp_path, "many.csv", "phone,patient\n+12125550101,Sam\n" + rows)
    res = CliRunner().invoke(app, ["campaign", "start", many, "--flow", CLINIC, "--trunk", "ST_1"])
    assert res.exit_code == 2, res.output
    assert f"{MAX_REPORTED + 5} bad contact lines" in res.output and "... and 5 more" in res.output
    assert f"{many}:3:" in res.output and f"{many}:{2 + MAX_REPORTED}:" in res.output
    assert f"{many}:{3 + MAX_REPORTED}:" not in res.output and "Traceback" not in res.output
    dnc = write(tmp_path, "dnc.txt", "+12125550101\nabc\n+12125550102\n12\n")
    with pytest.raises(ContactsError) as err:
        load_dnc(Path(dnc))
    assert f"{dnc}:2: " in str(err.value) and f"{dnc}:4: " in str(err.value)


async def test_start_status_pause_resume_list_and_report(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    temporal_server: object,
    temporal_client: Client,
    task_queue: str,
    sqlite_url: str,
) -> None:
    for k, v in {
        "RINGFLOW_TEMPORAL_ADDRESS": temporal_server.address,  # type: ignore[attr-defined]
        "RINGFLOW_DATABASE_URL": sqlite_url,
        "RINGFLOW_REDIS_URL": REDIS,
        "RINGFLOW_TASK_QUEUE": task_queue,
    }.items():
        monkeypatch.setenv(k, v)
    contacts = write(
        tmp_path,
        "c.csv",
        "phone,timezone,patient\n+12125550701,America/New_York,Sam\n"
        "+12125550702,,Ann\n+12125550701,,Sam again\n",
    )
    dnc = write(tmp_path, "dnc.txt", "# do not call\n+12125550702\n")
    runner = CliRunner()

    async def cli(*args: str) -> Result:
        res = await asyncio.to_thread(runner.invoke, app, ["campaign", *args])
        assert "Traceback" not in res.output, res.output
        return res

    cid = new_id()
    async with (
        fake_line(monkeypatch) as lk,
        running_worker(temporal_client, task_queue, sqlite_url, redis_url=REDIS),
        stand_in_agent(temporal_client, lk),
    ):
        use_livekit(monkeypatch, lk)
        res = await cli(
            "start",
            contacts,
            "--flow",
            CLINIC,
            "--trunk",
            lk.add_outbound_trunk(),
            "--id",
            cid,
            "--cps",
            "5",
            "--window",
            "always",
            "--retry",
            "no_answer=1/1s",
            "--dnc",
            dnc,
            "--json",
        )
        assert res.exit_code == 0, res.output
        assert json.loads(res.output)["contacts"] == 2  # the same number twice is one contact
        res = await cli("pause", cid, "--json")
        assert res.exit_code == 0 and json.loads(res.output)["result"] in ("paused", "cancelled")
        await cli("resume", cid)
        await asyncio.wait_for(temporal_client.get_workflow_handle(f"campaign-{cid}").result(), 60)
        status = await cli("status", cid, "--json")
        listed = await cli("list", "--json")
        report = await cli("report", cid, "--csv")
    progress = json.loads(status.output)
    assert progress["status"] == "finished" and progress["contacts"] == {"reached": 1, "dnc": 1}
    assert any(c["campaign_id"] == cid and c["flow"] == "clinic_reminder" for c in json.loads(listed.output))
    rows = list(csv.DictReader(io.StringIO(report.output)))
    assert [(r["phone"], r["state"], r["attempts"]) for r in rows] == [
        ("+12125550701", "reached", "1"),
        ("+12125550702", "dnc", "0"),
    ]
    assert rows[1]["timezone"] == "America/New_York"  # from the number's area code
    assert [d.sip_call_to for d in lk.dials] == ["+12125550701"]


async def test_a_simulated_campaign_stays_inspectable_afterwards(
    temporal_server: DevStack, tmp_path: Path, sqlite_url: str
) -> None:
    """`campaign simulate --address`: the campaign `campaign list` shows finished answers
    `campaign status` with its contacts and `campaign report` with a row each."""
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "RINGFLOW_TEMPORAL_ADDRESS": temporal_server.address,
        "RINGFLOW_DATABASE_URL": sqlite_url,
        "RINGFLOW_REDIS_URL": REDIS,
    }
    people = write(tmp_path, "c.csv", "phone,patient\n+12125550161,Sam\n+12125550162,Ann\n")
    args = ["campaign", "simulate", people, "--flow", str(CLINIC), "--answers", "human=1"]
    code, out, err = await ringflow(env, *args, "--address", temporal_server.address, "--json")
    assert code == 0, err
    cid = json.loads(out)["campaign_id"]
    code, out, err = await ringflow(env, "campaign", "list", "--json")
    assert code == 0, err
    assert {"campaign_id": cid, "status": "finished"}.items() <= next(
        r for r in json.loads(out) if r["campaign_id"] == cid
    ).items()
    code, out, err = await ringflow(env, "campaign", "status", cid, "--json")
    assert code == 0, err
    assert json.loads(out)["contacts"] == {"reached": 2}
    code, out, err = await ringflow(env, "campaign", "report", cid, "--json")
    assert code == 0, err
    assert sorted(r["state"] for r in json.loads(out)) == ["reached", "reached"]


async def test_start_refuses_without_telephony_before_claiming_a_contact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, temporal_server: DevStack, sqlite_url: str
) -> None:
    """No LiveKit configured, LiveKit without the trunk, LiveKit not answering: one line each,
    no contact stored, no campaign started."""
    for k, v in {
        "RINGFLOW_TEMPORAL_ADDRESS": temporal_server.address,
        "RINGFLOW_DATABASE_URL": sqlite_url,
        "RINGFLOW_REDIS_URL": REDIS,
    }.items():
        monkeypatch.setenv(k, v)
    for name in ("LIVEKIT_URL", "LIVEKIT_API_KEY", "LIVEKIT_API_SECRET"):
        monkeypatch.delenv(name, raising=False)
    contacts = write(tmp_path, "c.csv", "phone,patient\n+12125550171,Sam\n")
    cid = new_id()

    async def start(trunk: str) -> Result:
        args = ["campaign", "start", contacts, "--flow", CLINIC, "--trunk", trunk, "--id", cid]
        res = await asyncio.to_thread(CliRunner().invoke, app, args)
        assert res.exit_code == 2 and "Traceback" not in res.output, res.output
        return res

    res = await start("ST_missing")
    assert "LIVEKIT_URL, LIVEKIT_API_KEY, LIVEKIT_API_SECRET" in res.output
    async with FakeLiveKit() as lk:
        use_livekit(monkeypatch, lk)
        res = await start("ST_missing")
        assert "has no outbound trunk 'ST_missing'" in res.output
        monkeypatch.setenv("LIVEKIT_API_SECRET", "not-the-secret-" * 4)
        res = await start(lk.add_outbound_trunk())
        assert "refused the credentials" in res.output
    monkeypatch.setenv("LIVEKIT_URL", f"http://127.0.0.1:{free_port()}")  # nothing listens
    res = await start("ST_any")
    assert "does not answer" in res.output
    report = await asyncio.to_thread(CliRunner().invoke, app, ["campaign", "report", cid])
    assert report.exit_code == 1 and "no contacts" in report.output  # nothing was stored


def test_contact_files_excel_writes_are_read_and_unstorable_cells_are_refused(tmp_path: Path) -> None:
    """A UTF-8 BOM (Excel's "CSV UTF-8") is skipped; a NUL, a lone surrogate or a variable
    over the text limit is refused with its line, not met at dial time or by the database."""
    definition = load_flow(CLINIC)
    bom = tmp_path / "bom.csv"
    bom.write_bytes("\ufeffphone,patient\n+12125550101,Sam\n".encode())
    [c] = load_contacts(bom, definition)
    assert (c.phone, c.variables) == ("+12125550101", {"patient": "Sam"})
    bad = tmp_path / "bad.csv"
    bad.write_text(
        "phone,patient\n+12125550101,Sa\x00m\n+12125550102," + "x" * 20_000 + "\n+1212555CALL,Ann\n"
    )
    with pytest.raises(ContactsError) as err:
        load_contacts(bad, definition)
    text = str(err.value)
    assert f"{bad}:2: variable patient contains a NUL character (U+0000)" in text
    assert f"{bad}:3: variable 'patient' has 20000 characters; the limit is 16000" in text
    assert f"{bad}:4: phone '+1212555CALL' has letters" in text
    assert "x" * 100 not in text  # the cell itself is never echoed
