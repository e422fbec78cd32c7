"""A flow's knowledge base, as the flow file states it: the documents ``ringflow kb ingest``
reads (``knowledge:`` at the top level) and the search a function entry offers the LLM
(``knowledge:`` on an entry).

Only the shape lives here: reading, chunking, embedding and searching are I/O and live in
``activities/kb_*.py``. The knowledge base is named after the flow (``flow:``), so every
version of a flow searches the documents its latest ingest stored.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

DocumentType = Literal["markdown", "text", "pdf", "html", "csv"]
# what the LLM is offered when the entry states no parameters of its own
SEARCH_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "required": ["query"],
    "properties": {
        "query": {
            "type": "string",
            "minLength": 1,
            "maxLength": 500,
            "description": "What to look up, in the caller's words or a short question.",
        }
    },
}
SEARCH_DESCRIPTION = (
    "Search the knowledge base (policies, prices, opening hours, product facts) for passages "
    "that answer the caller's question. Answer only from the passages it returns."
)


class KnowledgeSource(BaseModel):
    """One document: a ``file`` (relative to the flow file) or a ``url`` fetched at ingest
    time. ``type`` is taken from the file's extension or the response's content type unless
    stated; ``name`` is how passages cite it (the file name or URL when not given)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    file: str | None = Field(None, min_length=1, max_length=1000)
    url: str | None = Field(None, min_length=1, max_length=2000)
    type: DocumentType | None = None
    name: str | None = Field(None, min_length=1, max_length=200)

    @model_validator(mode="after")
    def _one_place(self) -> KnowledgeSource:
        if (self.file is None) == (self.url is None):
            raise ValueError("a knowledge source has exactly one of 'file' or 'url'")
        return self

    @property
    def label(self) -> str:
        return self.name or self.file or self.url or ""


# the hidden function through which a node's automatic retrieval (``knowledge:`` on a node)
# runs: the agent calls it on each caller turn, the LLM is never offered it
RETRIEVAL_FUNCTION = "knowledge_retrieval"


def knowledge_flag(v: Any) -> Any:
    """``knowledge: true`` is the search with its defaults, ``false`` none."""
    if v is True:
        return {}
    return None if v is False else v


class KnowledgeSearch(BaseModel):
    """A function entry's search: at most ``top_k`` passages and ``max_bytes`` of text (UTF-8)
    go back to the LLM, so a large knowledge base never floods its context."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    top_k: int = Field(3, ge=1, le=20)
    max_bytes: int = Field(4000, ge=200, le=32000)
