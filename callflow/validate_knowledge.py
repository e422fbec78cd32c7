"""``flow validate``'s rules for the knowledge base: the ``knowledge:`` sources a flow lists
(files that exist, URLs that are http(s), a type Ringflow reads) and the function entries
that search them (no parameters of their own, never an action node's ``run``)."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol
from urllib.parse import urlsplit

from ringflow.callflow.knowledge import RETRIEVAL_FUNCTION
from ringflow.callflow.model import Flow, FunctionEntry, Node

# file extensions ``ringflow kb ingest`` reads, and the document type each is read as
EXTENSIONS = {
    ".md": "markdown",
    ".markdown": "markdown",
    ".txt": "text",
    ".text": "text",
    ".pdf": "pdf",
    ".html": "html",
    ".htm": "html",
    ".csv": "csv",
}


class _Reporter(Protocol):
    base_dir: Path | None

    def err(self, path: str, msg: str) -> None: ...


def check_knowledge_entry(v: _Reporter, path: str, fn: FunctionEntry, flow: Flow, is_run: bool) -> None:
    if not flow.knowledge:
        v.err(
            f"{path}.knowledge",
            "a knowledge entry searches the flow's documents: list them under 'knowledge:' at the top level",
        )
    if fn.parameters is not None:
        v.err(
            f"{path}.parameters",
            "a knowledge entry takes one argument, 'query', given by Ringflow: remove parameters",
        )
    if is_run:
        v.err(path, "an action node runs a handler or an http entry")


def check_knowledge_node(v: _Reporter, nid: str, node: Node, flow: Flow) -> None:
    """A node's automatic retrieval (``knowledge:`` on the node): on an agent node of a flow
    with documents; its hidden function's name is Ringflow's."""
    path = f"nodes.{nid}"
    for i, fn in enumerate(node.functions):
        if fn.name == RETRIEVAL_FUNCTION:
            v.err(
                f"{path}.functions[{i}].name",
                f"'{RETRIEVAL_FUNCTION}' is the name of a node's automatic retrieval: "
                "name the function otherwise",
            )
    if node.knowledge is None:
        return
    if node.type != "agent":
        v.err(
            f"{path}.knowledge",
            f"node '{nid}' is of type {node.type}: only an agent node answers the caller's "
            "turns from the knowledge base",
        )
    if not flow.knowledge:
        v.err(
            f"{path}.knowledge",
            f"node '{nid}' searches the flow's documents on each caller turn: list them under "
            "'knowledge:' at the top level",
        )


def check_knowledge_sources(v: _Reporter, flow: Flow) -> None:
    names: dict[str, int] = {}
    for i, src in enumerate(flow.knowledge):
        path = f"knowledge[{i}]"
        if src.label in names:
            v.err(f"{path}.name", f"two sources are both cited as '{src.label}': give one a 'name'")
        names[src.label] = i
        if src.url is not None:
            parts = urlsplit(src.url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                v.err(f"{path}.url", f"'{src.url}' is not an http(s) URL")
            continue
        file = src.file or ""
        if src.type is None and Path(file).suffix.lower() not in EXTENSIONS:
            v.err(
                f"{path}.type",
                f"'{file}': no type from its extension; say type: markdown, text, pdf, html or csv",
            )
        if v.base_dir is not None and not (v.base_dir / file).is_file():
            v.err(f"{path}.file", f"'{file}' does not exist (relative to the flow file)")
