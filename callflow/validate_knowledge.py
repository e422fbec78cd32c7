"""``flow validate``'s rules for the knowledge base: the ``knowledge:`` sources a flow lists
(files that exist, URLs that are http(s), a type Ringflow reads) and the function entries
that search them (no parameters of their own, never an action node's ``run``)."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol
from urllib.parse import urlsplit

from ringflow.callflow.model import Flow, FunctionEntry

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
