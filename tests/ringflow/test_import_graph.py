"""Ringflow's imports point one way and never run in a circle (README, "Layout").

The layers, top down: the entry points (``ringflow.*``: CLI, servers, simulation) ->
the agent and the workflow (``agents``, ``workflows``) -> the activities -> the wire
contract (``ringflow.contract``) -> the pure domain (``callflow``). A module imports its own
layer or one below it; the agent reaches the workflow's side only through
``workflows.client`` (the workflow never imports the agent); ``ringflow/__init__.py``, which
every ``ringflow.*`` import runs first, imports the domain alone; and the domain and the
contract import no I/O library, so the agent and the workflow's sandbox load them for free.

The graph is read from the source with ``ast``: every import, at module level, under
``TYPE_CHECKING`` or inside a function, counts (an import moved into a function to hide a
circle is still that circle). Names are taken both ways, ``callflow.x`` and
``ringflow.callflow.x``, so the test reads the tree the same before and after the packages
are installed under the one ``ringflow`` root.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.paths import ROOT

PACKAGES = ("callflow", "workflows", "activities", "agents", "ringflow")
OLD_ROOTS = ("callflow", "workflows", "activities", "agents")  # also installed as ringflow.<name>
CONTRACT = "ringflow.contract"
LAZY_CLIENT = "ringflow.client"  # ``from ringflow import Client``, imported on first use
RANK = {"domain": 0, "contract": 1, "activities": 2, "agents": 3, "workflows": 3, "entry": 4}
# The domain and the contract: what they may import from outside the standard library, and
# the parts of the standard library that do I/O, which they may not.
PURE_THIRD_PARTY = {"pydantic", "pydantic_core", "yaml", "jsonschema", "docstring_parser"}
IO_STDLIB = {
    "asyncio",
    "socket",
    "ssl",
    "http",
    "urllib.request",
    "subprocess",
    "sqlite3",
    "smtplib",
    "multiprocessing",
    "concurrent",
    "threading",
}


def canonical(name: str) -> str:
    """``ringflow.callflow.x`` and ``callflow.x`` are one module."""
    head, _, rest = name.partition(".")
    if head == "ringflow" and rest.split(".", 1)[0] in OLD_ROOTS:
        return rest
    return name


def layer(module: str) -> str:
    top = module.split(".", 1)[0]
    if top == "callflow":
        return "domain"
    if module == CONTRACT or module.startswith(CONTRACT + "."):
        return "contract"
    if top in ("activities", "agents", "workflows"):
        return top
    return "entry"


@dataclass
class Graph:
    files: dict[str, Path] = field(default_factory=dict)
    edges: dict[str, dict[str, int]] = field(default_factory=dict)  # module -> imported -> line
    outside: dict[str, dict[str, int]] = field(default_factory=dict)  # module -> library -> line


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return canonical(".".join(parts))


def imported_names(path: Path, here: str, modules: dict[str, Path]) -> list[tuple[str, int]]:
    """Every name ``path`` imports, anywhere in it, with its line (``here``: its package)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(canonical(alias.name), node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here.split(".")[: len(here.split(".")) - node.level + 1]
                target = canonical(".".join([*base, *([node.module] if node.module else [])]))
            else:
                target = canonical(node.module or "")
            for alias in node.names:  # ``from pkg import module`` imports that module
                sub = f"{target}.{alias.name}"
                found.append((sub if sub in modules else target, node.lineno))
    return found


def read_graph() -> Graph:
    g = Graph()
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            g.files[module_name(path)] = path
    for module, path in g.files.items():
        here = module if path.name == "__init__.py" else module.rpartition(".")[0]
        inside: dict[str, int] = g.edges.setdefault(module, {})
        outside: dict[str, int] = g.outside.setdefault(module, {})
        for name, line in imported_names(path, here, g.files):
            if name.split(".", 1)[0] not in PACKAGES:
                outside.setdefault(name, line)
                continue
            while name not in g.files and "." in name:
                name = name.rpartition(".")[0]
            if name != module:
                inside.setdefault(name, line)
    return g


GRAPH = read_graph()


def where(module: str, line: int) -> str:
    return f"{GRAPH.files[module].relative_to(ROOT)}:{line}"


def circles(edges: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_the_graph_is_read() -> None:
    """The reader sees the tree: an empty graph would pass every rule below."""
    assert {"callflow.engine", "workflows.call", "activities.persistence", "agents.controller"} <= set(
        GRAPH.files
    )
    assert "ringflow.contract.events" in GRAPH.files
    assert "callflow.engine" in GRAPH.edges["workflows.call"] or any(
        layer(m) == "domain" for m in GRAPH.edges["workflows.call"]
    )


def test_no_module_imports_in_a_circle() -> None:
    problems = []
    for component in circles(GRAPH.edges):
        ties = [
            f"{where(a, line)} imports {b}"
            for a in component
            for b, line in sorted(GRAPH.edges[a].items())
            if b in component
        ]
        problems.append(f"circle of {len(component)} modules:\n    " + "\n    ".join(ties))
    assert not problems, "\n".join(problems)


def test_imports_point_down_the_layers() -> None:
    problems = []
    for module, imported in GRAPH.edges.items():
        mine = layer(module)
        for other, line in imported.items():
            theirs = layer(other)
            if RANK[theirs] > RANK[mine]:
                problems.append(f"{where(module, line)}: {mine} imports {theirs} ({other})")
            elif mine == "agents" and theirs == "workflows" and other != "workflows.client":
                problems.append(f"{where(module, line)}: the agent imports workflow code ({other})")
            elif mine == "workflows" and theirs == "agents":
                problems.append(f"{where(module, line)}: the workflow imports the agent ({other})")
    assert not problems, "\n".join(problems)


def test_the_ringflow_package_face_imports_the_domain_alone() -> None:
    """Every ``ringflow.*`` import (the contract's, inside the workflow sandbox too) runs
    ``ringflow/__init__.py`` first: it must stay as light as the domain."""
    face = {m: line for m, line in GRAPH.edges["ringflow"].items() if m != LAZY_CLIENT}
    assert all(layer(m) == "domain" for m in face), face
    assert set(GRAPH.outside["ringflow"]) <= {"__future__"}, GRAPH.outside["ringflow"]
    # ``ringflow.Client`` is the one lazy attribute (``__getattr__``): importing ringflow loads none of it
    probe = (
        "import sys, ringflow\nprint(sorted({'httpx', 'ringflow.client', 'ringflow.api'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_domain_and_contract_import_no_io_library() -> None:
    problems = []
    for module, libraries in GRAPH.outside.items():
        if layer(module) not in ("domain", "contract"):
            continue
        for name, line in libraries.items():
            top = name.split(".", 1)[0]
            io = top in IO_STDLIB or name in IO_STDLIB or any(name.startswith(f"{m}.") for m in IO_STDLIB)
            third_party = top not in sys.stdlib_module_names and top != "__future__"
            if io or (third_party and top not in PURE_THIRD_PARTY):
                problems.append(f"{where(module, line)}: {layer(module)} imports {name}")
    assert not problems, "\n".join(problems)


def test_the_reader_takes_both_names_and_hidden_imports() -> None:
    """The rules hold whichever name a module is imported by, and see a function's import."""
    src = "from ringflow.callflow.engine import Engine\ndef f():\n    import agents.runner\n"
    seen = {
        canonical(n.module or "") if isinstance(n, ast.ImportFrom) else canonical(n.names[0].name)
        for n in ast.walk(ast.parse(src))
        if isinstance(n, ast.Import | ast.ImportFrom)
    }
    assert seen == {"callflow.engine", "agents.runner"}
    assert layer("callflow.engine") == "domain" and layer(canonical("ringflow.contract.call")) == "contract"
    assert circles({"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}}) == [["a", "b", "c"]]


def test_loading_the_contract_loads_no_io_library() -> None:
    """What the agent and the sandbox pay for the contract, as Python loads it (the packages'
    ``__init__`` modules included, which the rules above do not follow)."""
    contract = sorted(m for m in GRAPH.files if layer(m) == "contract")
    io = ["httpx", "aiohttp", "redis", "sqlalchemy", "sqlmodel", "psycopg", "livekit", "openai", "mcp"]
    io += ["temporalio", "workflows", "activities", "agents"]
    probe = (
        "import importlib, sys\n"
        f"for m in {contract!r}: importlib.import_module(m)\n"
        f"print(sorted({{n.split('.')[0] for n in sys.modules}} & set({io!r})))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
