"""``ringflow kb ingest FLOW``: read a flow's ``knowledge:`` sources, chunk and embed them,
and store them as the knowledge base's next version (``activities/kb_store.py``).

A source whose bytes are those of the newest version (same sha256) keeps its chunks and
vectors, copied into the new version, so re-ingesting after one document changed embeds
only that document. The new version becomes the one new calls search only once it is
written whole (one transaction); calls already running keep the version they started with.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from pathlib import Path

from ringflow.activities.kb_documents import Chunk, chunk_text, document_text, read_source
from ringflow.activities.kb_embed import Embedder
from ringflow.activities.kb_store import KbStore, Row, Version
from ringflow.callflow.model import Flow


@dataclass
class IngestReport:
    kb: str
    version: int
    embedder: str
    chunks: int
    embedded: list[str] = field(default_factory=list)  # sources read and embedded anew
    kept: list[str] = field(default_factory=list)  # sources unchanged since the last version
    pruned: list[int] = field(default_factory=list)  # old versions deleted
    seconds: float = 0.0


async def ingest(
    flow: Flow, base_dir: Path, store: KbStore, embedder: Embedder, allow_private: bool = False
) -> IngestReport:
    """Raises ``SourceError`` (naming the source) before anything is written."""
    started = time.monotonic()
    if not flow.knowledge:
        raise ValueError(f"flow '{flow.flow}' lists no knowledge sources ('knowledge:' at the top level)")
    previous = store.pick(flow.flow, None)
    reuse = previous is not None and previous.embedder == embedder.name
    sources: dict[str, dict[str, object]] = {}
    fresh: list[Chunk] = []
    kept: list[str] = []
    for src in flow.knowledge:
        kind, data = await read_source(src, base_dir, allow_private)
        digest = hashlib.sha256(data).hexdigest()
        before = previous.sources.get(src.label) if reuse and previous is not None else None
        if before is not None and before.get("sha256") == digest:
            kept.append(src.label)
            sources[src.label] = dict(before)
            continue
        chunks = chunk_text(document_text(kind, data, src.label), src.label)
        sources[src.label] = {"sha256": digest, "chunks": len(chunks)}
        fresh += chunks
    labels = [s.label for s in flow.knowledge]
    if previous is not None and not fresh and set(kept) == set(previous.sources) == set(labels):
        # nothing changed: the newest version stays (no copy of itself)
        return IngestReport(
            kb=flow.flow, version=previous.version, embedder=embedder.name, chunks=0, kept=kept
        )
    vectors = embedder.embed([c.text for c in fresh]) if fresh else []
    dim = len(vectors[0]) if vectors else embedder.dim or (previous.dim if previous else 0)
    rows = [Row(c.source, c.ordinal, c.text, v) for c, v in zip(fresh, vectors, strict=True)]
    total = sum(int(str(meta.get("chunks", 0))) for meta in sources.values())
    head = Version(
        kb=flow.flow,
        version=(previous.version + 1) if previous else 1,
        embedder=embedder.name,
        dim=dim,
        ingested_at=time.time(),
        sources=sources,
        chunks=total,
    )
    store.write_version(head, rows, previous.version if (kept and previous) else None, kept)
    pruned = store.prune(flow.flow, time.time())
    return IngestReport(
        kb=flow.flow,
        version=head.version,
        embedder=embedder.name,
        chunks=len(rows),
        embedded=[s.label for s in flow.knowledge if s.label not in kept],
        kept=kept,
        pruned=pruned,
        seconds=round(time.monotonic() - started, 3),
    )
