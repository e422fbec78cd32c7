"""The ``kb_search`` activity: the passages of a flow's knowledge base nearest a query.

The workflow runs it as a local activity when the LLM calls a ``knowledge`` function entry
(a few milliseconds: embed the query, one indexed query). What goes back to the LLM is
bounded twice, by ``top_k`` passages and by ``max_bytes`` of text, and each passage names
its source, so the answer can cite it and the call's record shows where it came from.
A missing knowledge base or an embedder other than the one it was built with is an answer
to the LLM (``status: error``), not a failed activity: retrying would not change it.
"""

from __future__ import annotations

import threading
from typing import Any

from pydantic import BaseModel, Field
from temporalio import activity

from ringflow.activities.db_work import DB_WORK
from ringflow.activities.kb_embed import Embedder, EmbedderError, embedder_for
from ringflow.activities.kb_store import Hit, KbStore, KbStoreError, open_store
from ringflow.activities.metrics import timed


class KbSearchRequest(BaseModel):
    call_id: str = Field(min_length=1)
    kb: str = Field(min_length=1, max_length=100)  # the flow's name
    query: str = Field(min_length=1, max_length=2000)
    top_k: int = Field(3, ge=1, le=20)
    max_bytes: int = Field(4000, ge=200, le=32000)
    as_of: float | None = None  # the call's start: the version it searches (kb_store.py)


def bounded(hits: list[Hit], max_bytes: int) -> list[dict[str, Any]]:
    """The passages, nearest first, cut to ``max_bytes`` of UTF-8 text in all (the last one
    shortened at a word, never dropped mid-character)."""
    out: list[dict[str, Any]] = []
    left = max_bytes
    for h in hits:
        data = h.text.encode()
        if len(data) > left:
            if left < 80 or (out and left < len(data) // 3):
                break
            cut = data[:left].decode(errors="ignore")
            text = cut[: cut.rfind(" ")] + " ..." if " " in cut else cut
        else:
            text = h.text
        out.append(
            {"source": h.source, "chunk": h.ordinal, "score": round(1.0 - h.distance, 4), "text": text}
        )
        left -= len(text.encode())
        if left <= 0:
            break
    return out


def error(message: str) -> dict[str, Any]:
    return {"status": "error", "error": message, "passages": []}


class KbSearcher:
    """The activity, bound to the worker's database and embedder settings."""

    def __init__(
        self,
        database_url: str,
        embeddings: str = "minilm",
        base_url: str | None = None,
        api_key: str | None = None,
    ) -> None:
        self.database_url = database_url
        self.embeddings = embeddings
        self.base_url = base_url
        self.api_key = api_key
        self._store: KbStore | None = None
        self._lock = threading.Lock()

    def store(self) -> KbStore:
        with self._lock:
            if self._store is None:
                self._store = open_store(self.database_url)
            return self._store

    def embedder(self) -> Embedder:
        return embedder_for(self.embeddings, self.base_url, self.api_key)

    def search(self, req: KbSearchRequest) -> dict[str, Any]:
        """Blocking: the embedding and the query (run on the stores' threads)."""
        try:
            store = self.store()
            version = store.pick(req.kb, req.as_of)
            if version is None:
                return error(
                    f"the knowledge base of flow '{req.kb}' is empty: run `ringflow kb ingest` on the flow"
                )
            embedder = self.embedder()
            if version.embedder != embedder.name:
                return error(
                    f"knowledge base '{req.kb}' was built with '{version.embedder}' embeddings and this "
                    f"worker embeds with '{embedder.name}' (RINGFLOW_KB_EMBEDDINGS): ingest it again"
                )
            (vector,) = embedder.embed([req.query])
            hits = store.search(version, vector, req.top_k)
        except (KbStoreError, EmbedderError) as exc:
            return error(str(exc))
        return {
            "status": "ok",
            "query": req.query,
            "version": version.version,
            "passages": bounded(hits, req.max_bytes),
        }

    @activity.defn(name="kb_search")
    async def kb_search(self, req: KbSearchRequest) -> dict[str, Any]:
        with timed("function", "knowledge") as outcome:
            result = await DB_WORK.run(self.search, req)
            outcome["ok"] = result.get("status") == "ok"
        return result
