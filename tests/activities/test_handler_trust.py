"""Handlers are trusted code, and the worker decides which: modules only from its flow
directories (RINGFLOW_FLOWS_DIR), never from the client's path or sys.path, and only async
functions that keep the handler contract. Run as the worker runs them (the activity), and
through a real worker for a definition that never went through validation."""

from __future__ import annotations

import shutil
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.testing import ActivityEnvironment

from ringflow.activities import flow_store
from ringflow.activities.handler_run import (
    HandlerCheck,
    HandlerInput,
    HandlerOutput,
    HandlerRunner,
    handlers_problem,
    parse_flow_dirs,
)
from ringflow.callflow.loader import load_flow
from ringflow.callflow.model import Flow, FlowDefinition
from ringflow.callflow.subflow_handlers import handler_module
from tests.support.wfkit import req, running_worker, start, wait_state

GOOD = '''
from ringflow import TRANSITION_IN_YAML

WHERE = "{where}"


async def whereami(flow_manager):
    """Say which copy of the module ran."""
    return {{"where": WHERE}}, TRANSITION_IN_YAML
'''

SYNC = '''
from pathlib import Path


def lookup(flow_manager, key: str):
    """Look it up (but not async: the contract says async)."""
    Path({marker!r}).write_text("ran")
    return {{}}, None
'''


@pytest.fixture
def module_name() -> str:
    name = f"trust_{uuid.uuid4().hex[:8]}"
    yield name
    sys.modules.pop(name, None)


def write(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.py").write_text(text)
    return folder


async def run(
    dirs: list[Path] | str | None, module: str, name: str, source: str | None, **args: object
) -> HandlerOutput:
    inp = HandlerInput(call_id="c1", node="n", name=name, module=module, flow_source=source, args=args)
    out: HandlerOutput = await ActivityEnvironment().run(HandlerRunner(dirs).run_handler, inp)
    return out


async def test_the_workers_copy_runs_not_the_one_beside_the_clients_flow(
    tmp_path: Path, module_name: str
) -> None:
    client_flow = (
        write(tmp_path / "laptop" / "repo" / "flows" / "sales", module_name, GOOD.format(where="client"))
        / "flow.yaml"
    )
    app = tmp_path / "app" / "flows"
    write(app / "sales", module_name, GOOD.format(where="worker"))
    out = await run([app], module_name, "whereami", str(client_flow))
    assert out.error is None and out.result == {"where": "worker"}


async def test_two_flow_directories_each_keep_their_own_module_of_one_name(
    tmp_path: Path, module_name: str
) -> None:
    # One worker for scripts from two places: the first directory's root holds a module of
    # the same name as the one beside the second directory's flow. Each flow gets its own,
    # however often the two alternate.
    first = write(tmp_path / "examples" / "reminder", module_name, GOOD.format(where="first"))
    second = write(tmp_path / "shared" / "scripts", module_name, GOOD.format(where="second"))
    for _ in range(2):
        mine = await run([first, second], module_name, "whereami", str(second / "reminder.yaml"))
        assert mine.error is None and mine.result == {"where": "second"}
        theirs = await run([first, second], module_name, "whereami", str(first / "reminder.yaml"))
        assert theirs.error is None and theirs.result == {"where": "first"}


async def test_a_module_outside_the_flow_directories_is_not_imported(
    tmp_path: Path, module_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = write(tmp_path / "site-packages", module_name, GOOD.format(where="sys.path"))
    monkeypatch.syspath_prepend(str(site))  # importable, but not a flow directory
    (tmp_path / "flows").mkdir()
    out = await run([tmp_path / "flows"], module_name, "whereami", str(tmp_path / "elsewhere" / "f.yaml"))
    assert out.result is None and "is not in the worker's flow directories" in (out.error or "")
    assert module_name not in sys.modules
    stdlib = await run([tmp_path / "flows"], "os", "getcwd", None)
    assert "'os' is not in the worker's flow directories" in (stdlib.error or "")


async def test_a_function_without_the_handler_contract_never_runs(tmp_path: Path, module_name: str) -> None:
    marker = tmp_path / "ran.txt"
    flows = write(tmp_path / "flows", module_name, SYNC.format(marker=str(marker)))
    out = await run([flows], module_name, "lookup", str(flows / "flow.yaml"), key="k")
    assert out.error is not None and "was refused: must be an async function" in out.error
    assert not marker.exists()


def test_flows_dir_setting_and_its_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert parse_flow_dirs(None) == [tmp_path.resolve()]
    both = parse_flow_dirs(f"{tmp_path}/a:{tmp_path}/b")
    assert both == [(tmp_path / "a").resolve(), (tmp_path / "b").resolve()]


async def test_a_definition_naming_os_as_its_handlers_runs_nothing(
    temporal_client: Client, task_queue: str, sqlite_url: str
) -> None:
    """Built without ``flow validate``, as a hostile client could send it."""
    flow = Flow.model_validate(
        {
            "flow": "rogue",
            "handlers": "os",
            "nodes": {
                "ask": {
                    "task": "Ask.",
                    "functions": [
                        {"name": "getcwd"},
                        {
                            "name": "done",
                            "transition_only": True,
                            "description": "Done.",
                            "transition_to": "bye",
                        },
                    ],
                },
                "bye": {"type": "end", "task": "Bye."},
            },
        }
    )
    async with running_worker(temporal_client, task_queue, sqlite_url):
        call = await start(
            temporal_client, task_queue, FlowDefinition(flow=flow, source="/tmp/rogue.yaml"), variables={}
        )
        out = await call.call_function(req("ask", "getcwd"))
        assert out.error and "'os' is not in the worker's flow directories" in str(out.result)
        st = await wait_state(call, lambda s: s.node == "ask", what="call goes on")
        assert st.status != "ended"
        await call.hangup()
        await call.handle.result()


# --- a used flow's handlers module (callflow/subflow_handlers.py) ---------------------------
SUBFLOW_HANDLERS = Path(__file__).parents[1] / "fixtures" / "subflow_handlers"


@pytest.fixture
def account(tmp_path: Path) -> Iterator[Path]:
    """A copy of the account flow and the verify_dob flow it uses, each with a ``handlers``."""
    shutil.copytree(SUBFLOW_HANDLERS, tmp_path / "flows", ignore=shutil.ignore_patterns("__pycache__"))
    yield tmp_path / "flows" / "account" / "flow.yaml"
    sys.modules.pop("handlers", None)


async def test_a_used_flows_function_runs_from_its_module_and_only_from_a_trusted_folder(
    account: Path,
) -> None:
    d = load_flow(account)
    module, source = handler_module(d, "verify")
    assert (module, Path(source or "").resolve()) == (
        "handlers",
        account.parents[1] / "verify_dob" / "flow.yaml",
    )
    inp = HandlerInput(
        call_id="c1",
        node="verify.ask_dob",
        name="check",
        module=module,
        flow_source=source,
        subflow=True,
        args={"date_of_birth": "1990-11-02"},
        variables={"date_of_birth": "1990-11-02"},
    )
    out: HandlerOutput = await ActivityEnvironment().run(HandlerRunner([account.parents[1]]).run_handler, inp)
    assert out.error is None and out.result == {"matches": True}
    assert out.changed == {"checked_by": "verify_dob", "dob_matches": True}
    ours = await ActivityEnvironment().run(
        HandlerRunner([account.parents[1]]).run_handler,
        inp.model_copy(
            update={
                "node": "lookup",
                "args": {"account": "1234"},
                "flow_source": str(account),
                "subflow": False,
            }
        ),
    )
    assert ours.error is None and ours.changed == {"checked_by": "account"}
    # a worker trusting only the calling flow's folder refuses the used flow's module, by name
    # (never taking the calling flow's module of the same name, at that directory's root)
    refused = await ActivityEnvironment().run(HandlerRunner([account.parent]).run_handler, inp)
    assert refused.result is None
    assert "handlers module 'handlers' is not in the worker's flow directories" in (refused.error or "")


def test_a_published_version_hashes_the_used_flows_module_and_the_worker_checks_it(account: Path) -> None:
    d = load_flow(account)
    hashes = flow_store.handler_hashes(d, account.parent)
    assert set(hashes) == {"handlers", "handlers@../verify_dob/flow.yaml"}
    check = HandlerCheck(version="0123456789ab", flow_source=str(account), handlers=hashes)
    assert handlers_problem(check, [account.parents[1]]) is None
    sub_code = account.parents[1] / "verify_dob" / "handlers.py"
    sub_code.write_text(sub_code.read_text() + "\n# changed\n")
    changed = flow_store.handler_hashes(d, account.parent)
    assert changed["handlers"] == hashes["handlers"] and changed != hashes
    content = flow_store.content_of(d)
    assert flow_store.content_id(content, changed) != flow_store.content_id(content, hashes)
    problem = handlers_problem(check, [account.parents[1]]) or ""
    assert problem.startswith("the worker's handlers module 'handlers@../verify_dob/flow.yaml' (handlers.py")
    assert "is not the code flow version 0123456789ab was published with" in problem
