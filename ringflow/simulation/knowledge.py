"""A simulated call's knowledge base: the script's flow's ``knowledge:`` sources are ingested
into the simulator's own database before the call, as ``ringflow kb ingest`` would into a
deployment's, so ``ringflow call simulate`` needs no step of its own. Sources unchanged
since the last ingest into that database are not written again (``activities/kb_ingest.py``)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from ringflow.activities.kb_embed import embedder_for
from ringflow.activities.kb_ingest import ingest
from ringflow.activities.kb_store import open_store
from ringflow.callflow.loader import load_flow
from ringflow.settings import get_settings

# the database of each simulator worker, by its task queue (simulator.environment)
SIM_DATABASES: dict[str, str] = {}
_LOCK = asyncio.Lock()


async def ingest_for_script(flow_path: Path, task_queue: str) -> None:
    url = SIM_DATABASES.get(task_queue)
    if url is None or not flow_path.is_file():
        return
    flow = load_flow(flow_path).flow
    if not flow.knowledge:
        return
    settings = get_settings()
    async with _LOCK:  # scripts played at once share the database
        store = open_store(url)
        try:
            await ingest(
                flow,
                flow_path.parent,
                store,
                embedder_for(settings.kb_embeddings),
                settings.http_allow_private,
            )
        finally:
            store.close()
