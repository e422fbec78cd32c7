"""The upgrade rule's bookkeeping: what the workflow code looked like at the last release.

A deploy replays every running call on the new code, so a change to the workflow code
that issues other commands must be guarded by ``workflow.patched``. ``tests/histories``
holds calls recorded on the last release; ``tests/workflow_release.json`` stores, next to
them, a fingerprint of that release's workflow code (its syntax tree without docstrings,
so comments and formatting do not count) and the patch ids it already had.
``tests/test_upgrade.py`` fails when the code differs from the release's and no new patch
id appeared, unless the change is listed under ``reviewed_without_patch`` with a reason
(a refactoring that issues the same commands, which the replay tests then confirm).

At a release, after draining the old workers' calls, record new histories and a new
manifest: ``python tests/make_histories.py --force`` (it calls :func:`write_manifest`).
"""

from __future__ import annotations

import ast
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MANIFEST = ROOT / "tests" / "workflow_release.json"  # not in histories/: every *.json there is replayed
# Never run inside a workflow: the client side and the worker's wiring.
NOT_WORKFLOW_CODE = ("client.py", "worker.py", "heap.py", "__init__.py")


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


def patch_ids() -> set[str]:
    """Every id passed to ``workflow.patched``/``deprecate_patch`` in the workflow code, with
    module-level string constants resolved."""
    constants: dict[str, str] = {}
    calls: list[ast.expr] = []
    for path in _files():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
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
                and node.func.attr in ("patched", "deprecate_patch")
                and node.args
            ):
                calls.append(node.args[0])
    ids = set()
    for arg in calls:
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            ids.add(arg.value)
        elif isinstance(arg, ast.Name):
            ids.add(constants.get(arg.id, f"<unresolved {arg.id}>"))
    return ids


def read_manifest() -> dict[str, Any]:
    return json.loads(MANIFEST.read_text())


def write_manifest(release: str) -> None:
    MANIFEST.write_text(
        json.dumps(
            {
                "release": release,
                "workflow_code": fingerprint(),
                "patches": sorted(patch_ids()),
                "reviewed_without_patch": [],
            },
            indent=2,
        )
        + "\n"
    )


if __name__ == "__main__":  # python tests/workflow_fingerprint.py: show today's values
    json.dump({"workflow_code": fingerprint(), "patches": sorted(patch_ids())}, sys.stdout, indent=2)
    print()
