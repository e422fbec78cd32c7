"""The upgrade rule's bookkeeping: what the workflow code looked like at the last release,
and the patch policy checked against it.

A deploy replays every running call and campaign on the new code, so a change to the
workflow code that issues other commands must be guarded by ``workflow.patched`` with an id
registered in ``workflows/patches.py``. ``tests/histories`` holds calls and campaigns
recorded on the last release; ``tests/workflow_release.json`` stores, next to them, the
release's version, a fingerprint of its workflow code (its syntax tree without docstrings,
so comments and formatting do not count) and its patch registry (each id's state and since).

:func:`policy_problems` is the policy (``tests/workflows/test_upgrade.py`` runs it on the repository
and on made-up cases): every id the code passes to ``workflow.patched`` or
``workflow.deprecate_patch`` is registered in that state, every registered id is used, a
released id moves one step per release (``patched`` -> ``deprecated`` -> removed), and a
change to the workflow code since the release comes with a change to the registry, or is
listed under ``reviewed_without_patch`` with a reason (a refactoring that issues the same
commands, which the replay tests then confirm), or is a new release.

At a release, after the calls and campaigns started on the previous one have ended, bump
the version and record the new baseline: ``make histories`` (it runs
``python tests/support/workflow_fingerprint.py --record`` last, which refuses a registry that
breaks the policy against the previous record).
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import re
import sys
import tomllib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

from ringflow.workflows.patches import PATCHES, Patch  # noqa: E402

MANIFEST = ROOT / "tests" / "workflow_release.json"  # not in histories/: every *.json there is replayed
REGISTRY = "workflows/patches.py"
# Never run inside a workflow: the client side and the worker's wiring.
NOT_WORKFLOW_CODE = ("client.py", "worker.py", "heap.py", "__init__.py")
USES = {"patched": "patched", "deprecate_patch": "deprecated"}  # SDK call -> the state it means
ID_FORM = re.compile(r"[a-z0-9]+(-[a-z0-9]+)*")  # one naming style: kebab-case, no version suffix needed
RELEASE_FORM = re.compile(r"\d+\.\d+\.\d+")


def _files() -> list[Path]:
    return sorted(p for p in (ROOT / "workflows").glob("*.py") if p.name not in NOT_WORKFLOW_CODE)


def _strip_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(body, list)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            body.pop(0)
            if not body:
                body.append(ast.Pass())
    return tree


def fingerprint() -> str:
    digest = hashlib.sha256()
    for path in _files():
        digest.update(path.name.encode())
        digest.update(ast.dump(_strip_docstrings(ast.parse(path.read_text()))).encode())
    return digest.hexdigest()


def patch_uses(files: Iterable[Path] | None = None) -> dict[str, set[str]]:
    """Every id passed to ``workflow.patched``/``deprecate_patch`` in the workflow code, with
    the states its calls mean (``patched``, ``deprecated``). Names and ``module.NAME``
    attributes resolve to module-level string constants of the workflow code (the registry's
    among them); anything else is ``<unresolved ...>``, which the policy refuses."""
    constants: dict[str, str] = {}
    calls: list[tuple[ast.expr, str]] = []
    for path in _files() if files is None else files:
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)
            ):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        constants[target.id] = node.value.value
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in USES
                and node.args
            ):
                calls.append((node.args[0], USES[node.func.attr]))
    uses: dict[str, set[str]] = {}
    for arg, state in calls:
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            pid = arg.value
        elif isinstance(arg, ast.Name | ast.Attribute):
            name = arg.id if isinstance(arg, ast.Name) else arg.attr
            pid = constants.get(name, f"<unresolved {ast.unparse(arg)}>")
        else:
            pid = f"<unresolved {ast.unparse(arg)}>"
        uses.setdefault(pid, set()).add(state)
    return uses


def patch_ids() -> set[str]:
    return set(patch_uses())


def version() -> str:
    return str(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"])


def _v(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def registry_record(patches: Iterable[Patch]) -> list[dict[str, str]]:
    return [{"id": p.id, "state": p.state, "since": p.since} for p in sorted(patches, key=lambda p: p.id)]


def registry_problems(
    patches: Iterable[Patch], uses: dict[str, set[str]], release: dict[str, Any]
) -> list[str]:
    """The registry against the code that uses it and the last release's record."""
    patches = list(patches)
    problems: list[str] = []
    ids = [p.id for p in patches]
    problems += [
        f"patch id {i!r} is registered twice in {REGISTRY}"
        for i in sorted({i for i in ids if ids.count(i) > 1})
    ]
    for p in patches:
        if not ID_FORM.fullmatch(p.id):
            problems.append(f"patch id {p.id!r} in {REGISTRY} is not kebab-case (e.g. 'call-greets-twice')")
        if p.state not in USES.values():
            problems.append(f"patch id {p.id!r} has state {p.state!r}: patched or deprecated")
        if not RELEASE_FORM.fullmatch(p.since):
            problems.append(f"patch id {p.id!r} has since {p.since!r}: a release X.Y.Z")
    if problems:
        return problems
    registered = {p.id: p for p in patches}
    for pid, states in sorted(uses.items()):
        if pid.startswith("<unresolved"):
            problems.append(
                f"a workflow.patched/deprecate_patch id is not a string constant: {pid}; "
                f"pass the id's constant from {REGISTRY}"
            )
        elif pid not in registered:
            problems.append(
                f"workflow code uses patch id {pid!r}, which is not in {REGISTRY}: register it there "
                f'(Patch({pid!r}, "patched", "<next release>", "<what it guards>")) and pass its constant'
            )
        elif states != {registered[pid].state}:
            call = {"patched": "workflow.patched", "deprecated": "workflow.deprecate_patch"}
            problems.append(
                f"patch id {pid!r} is {registered[pid].state} in {REGISTRY} but the code calls "
                + " and ".join(sorted(call[s] for s in states))
                + f" with it: use {call[registered[pid].state]} only"
            )
    problems += [
        f"patch id {p.id!r} is registered in {REGISTRY} but no workflow code uses it: a patch "
        "leaves the registry only when it leaves the code (and only once deprecated for a release)"
        for p in patches
        if p.id not in uses
    ]
    last = release.get("release", "0")
    before = {p["id"]: p for p in release.get("patches", []) if isinstance(p, dict)}
    for p in patches:
        prev = before.get(p.id)
        moved = prev is None or prev["state"] != p.state
        if prev is not None and prev["state"] == "deprecated" and p.state == "patched":
            problems.append(f"patch id {p.id!r} was deprecated in release {last}; it cannot be patched again")
        elif moved and _v(p.since) <= _v(last):
            problems.append(
                f"patch id {p.id!r} became {p.state} after release {last}: its since must be a later "
                f"release, not {p.since}"
            )
        elif not moved and prev is not None and p.since != prev["since"]:
            problems.append(f"patch id {p.id!r}: since was {prev['since']} in release {last}, now {p.since}")
    for pid, prev in sorted(before.items()):
        if pid not in registered and prev["state"] != "deprecated":
            problems.append(
                f"patch id {pid!r} was removed, but release {last} shipped it as {prev['state']}: calls "
                f"from that release may still replay it. First make it workflow.deprecate_patch({pid!r}) "
                f'(state "deprecated" in {REGISTRY}) for a release, then remove it'
            )
    return problems


def policy_problems(
    patches: Iterable[Patch],
    uses: dict[str, set[str]],
    release: dict[str, Any],
    code: str,
    current_version: str,
) -> list[str]:
    """Everything the upgrade rule refuses, as messages that say what to do; empty: fine."""
    patches = list(patches)
    problems = registry_problems(patches, uses, release)
    last = release.get("release")
    if current_version != last:
        problems.append(
            f"the version is {current_version} but the recorded release is {last}: a release "
            "re-records its baseline (make histories) once the previous one's calls have ended"
        )
    reviewed = {r["fingerprint"] for r in release.get("reviewed_without_patch", [])}
    if code != release.get("workflow_code") and code not in reviewed:
        if registry_record(patches) == release.get("patches"):
            problems.append(
                f"workflows/ changed since release {last} without a patch: a call or campaign in "
                "flight during the deploy would replay the new code and may get stuck. Guard the "
                f"behaviour change with a new id in {REGISTRY} (if workflow.patched(ID): new, else "
                "old); if the change issues exactly the same commands (a refactoring), add "
                f'{{"fingerprint": "{code}", "why": "..."}} to reviewed_without_patch in '
                f"{MANIFEST.relative_to(ROOT)}; or cut a release (bump the version, make histories)."
            )
    return problems


def read_manifest() -> dict[str, Any]:
    return dict(json.loads(MANIFEST.read_text()))


def write_manifest(release: str) -> None:
    """Record ``release`` as the baseline: refused when the registry breaks the policy against
    the previous record (a record of a release before the registry existed has no ids to keep)."""
    previous = read_manifest() if MANIFEST.exists() else {}
    problems = registry_problems(PATCHES, patch_uses(), previous)
    problems += [
        f"patch id {p.id!r} has since {p.since}, later than the release {release} being recorded"
        for p in PATCHES
        if RELEASE_FORM.fullmatch(p.since) and _v(p.since) > _v(release)
    ]
    if previous and _v(release) < _v(previous.get("release", "0")):
        problems.append(f"release {release} is older than the recorded {previous['release']}")
    if problems:
        raise SystemExit("release not recorded:\n- " + "\n- ".join(problems))
    record = {
        "release": release,
        "workflow_code": fingerprint(),
        "patches": registry_record(PATCHES),
        "reviewed_without_patch": [],
    }
    MANIFEST.write_text(json.dumps(record, indent=2) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description="Show or record the workflow code's release fingerprint.")
    parser.add_argument(
        "--record",
        action="store_true",
        help="record the current version as the release baseline (make histories)",
    )
    args = parser.parse_args()
    if args.record:
        write_manifest(version())
        print(f"{MANIFEST.relative_to(ROOT)}: release {version()} recorded")
        return
    uses = {pid: sorted(states) for pid, states in patch_uses().items()}
    json.dump({"version": version(), "workflow_code": fingerprint(), "uses": uses}, sys.stdout, indent=2)
    print()


if __name__ == "__main__":  # python tests/support/workflow_fingerprint.py [--record]
    main()
