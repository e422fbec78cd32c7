"""``ringflow kb ...``: a flow's knowledge base (docs/knowledge.md).

``ingest`` reads the flow's ``knowledge:`` sources (files next to the flow, URLs through
the SSRF guard), chunks and embeds them with ``RINGFLOW_KB_EMBEDDINGS`` and writes them to
the call records' database (``RINGFLOW_DATABASE_URL``) as the knowledge base's next version.
``search`` runs the query a ``knowledge`` entry would, to check what a caller would get.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import typer

from ringflow.cli.temporal import fail

kb_app = typer.Typer(help="Knowledge bases: ingest a flow's documents, search them.", no_args_is_help=True)


def _flow_path(ref: str) -> Path:
    """The flow file a reference names: a file, or a published ``NAME``, ``NAME@VERSION`` or
    ``NAME@CHANNEL`` (docs/flow-versions.md) whose definition says the file it came from (its
    documents are found next to that file)."""
    from ringflow.activities import flow_store
    from ringflow.settings import get_settings

    path = Path(ref)
    if path.is_file():
        return path
    url = get_settings().database_url
    try:
        found = flow_store.resolve(url, ref)
        definition = flow_store.load_definition(url, found.name, found.version)
    except flow_store.FlowRefError as exc:
        raise fail(f"{ref}: {exc}", 2) from None
    source = Path(definition.source) if definition.source else None
    if source is None or not source.is_file():
        raise fail(f"{ref}: the published version's file is not here ({source}): ingest the flow file", 2)
    return source


def _open(settings: Any) -> tuple[Any, Any]:
    from ringflow.activities.kb_embed import EmbedderError, embedder_for
    from ringflow.activities.kb_store import KbStoreError, open_store

    try:
        store = open_store(
            settings.database_url, settings.database_connect_timeout_s, settings.database_statement_timeout_s
        )
        key = settings.openai_api_key.get_secret_value() if settings.openai_api_key else None
        embedder = embedder_for(
            settings.kb_embeddings, settings.kb_embeddings_url or settings.openai_base_url, key
        )
    except (KbStoreError, EmbedderError) as exc:
        raise fail(str(exc)) from None
    except Exception as exc:  # the database refused the connection
        raise fail(f"cannot open the knowledge base's database: {type(exc).__name__}: {exc}") from None
    return store, embedder


@kb_app.command("ingest")
def ingest(
    flow: str = typer.Argument(
        ..., help="The flow: a file, or a published NAME, NAME@VERSION or NAME@CHANNEL."
    ),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Read, chunk and embed the flow's knowledge sources into its knowledge base's next version."""
    from ringflow.activities.kb_documents import SourceError
    from ringflow.activities.kb_embed import EmbedderError
    from ringflow.activities.kb_ingest import ingest as run_ingest
    from ringflow.cli.sip import _load
    from ringflow.settings import get_settings

    path = _flow_path(flow)
    definition = _load(path)
    if not definition.flow.knowledge:
        raise fail(f"{path}: the flow lists no knowledge sources ('knowledge:' at the top level)", 2)
    settings = get_settings()
    store, embedder = _open(settings)
    try:
        report = asyncio.run(
            run_ingest(definition.flow, path.parent, store, embedder, settings.http_allow_private)
        )
    except (SourceError, EmbedderError) as exc:
        raise fail(f"{path}: {exc}") from None
    finally:
        store.close()
    if json_out:
        typer.echo(json.dumps(asdict(report)))
        return
    typer.echo(
        f"knowledge base '{report.kb}' version {report.version}: {report.chunks} chunks embedded "
        f"({report.embedder}) from {len(report.embedded)} source(s) in {report.seconds:g} s"
    )
    if report.kept:
        typer.echo(f"unchanged, kept: {', '.join(report.kept)}")
    if report.pruned:
        typer.echo(f"old versions deleted: {', '.join(map(str, report.pruned))}")


@kb_app.command("search")
def search(
    flow: str = typer.Argument(
        ..., help="The flow (a file, NAME or NAME@VERSION) or its knowledge base's name."
    ),
    query: str = typer.Argument(..., help="What a caller would ask."),
    top_k: int = typer.Option(3, "--top-k", min=1, max=20),
    max_bytes: int = typer.Option(4000, "--max-bytes", min=200, max=32000),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """The passages a `knowledge` entry would give the LLM for QUERY, nearest first."""
    import re

    from ringflow.activities.kb_search import KbSearcher, KbSearchRequest
    from ringflow.callflow.model import FLOW_NAME_PATTERN
    from ringflow.settings import get_settings

    name = flow
    if not re.match(FLOW_NAME_PATTERN, flow) or Path(flow).is_file():
        from ringflow.cli.sip import _load

        name = _load(_flow_path(flow)).flow.flow
    settings = get_settings()
    key = settings.openai_api_key.get_secret_value() if settings.openai_api_key else None
    searcher = KbSearcher(
        settings.database_url,
        settings.kb_embeddings,
        settings.kb_embeddings_url or settings.openai_base_url,
        key,
    )
    result = searcher.search(
        KbSearchRequest(call_id="cli", kb=name, query=query, top_k=top_k, max_bytes=max_bytes)
    )
    if json_out:
        typer.echo(json.dumps(result))
    elif result["status"] != "ok":
        raise fail(result["error"])
    else:
        for p in result["passages"]:
            typer.echo(f"[{p['source']}#{p['chunk']}] score {p['score']}\n{p['text']}\n")
    if result["status"] != "ok":
        raise typer.Exit(1)
