"""Reading knowledge sources and cutting them into chunks (``activities/kb_documents.py``):
each document type's text, chunks that keep their section and stay within their size, and
URLs fetched at ingest time through the SSRF guard (a real HTTP server on 127.0.0.1)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from aiohttp import web

from ringflow.activities.kb_documents import SourceError, chunk_text, document_text, read_source
from ringflow.callflow.knowledge import KnowledgeSource
from tests.support.kbkit import FIXTURES, make_pdf


def test_each_type_becomes_plain_text() -> None:
    html = document_text("html", (FIXTURES / "insurance.html").read_bytes(), "insurance.html")
    assert "Blue Shield and Aetna" in html and "## Insurance" in html
    assert "do not index" not in html and "color:red" not in html  # scripts and styles dropped
    csv = document_text("csv", (FIXTURES / "prices.csv").read_bytes(), "prices.csv")
    assert "service: Teeth whitening; price: 300 dollars; duration: 90 minutes" in csv
    pdf = document_text("pdf", make_pdf(["Dentures are repaired", "within three days."]), "d.pdf")
    assert "Dentures are repaired" in pdf and "within three days." in pdf


def test_a_damaged_pdf_is_a_clear_error() -> None:
    with pytest.raises(SourceError, match=r"'broken.pdf': not a readable PDF"):
        document_text("pdf", b"%PDF-1.4 nonsense", "broken.pdf")


def test_chunks_keep_their_headings_and_stay_within_size() -> None:
    body = " ".join(f"Sentence number {i} says something about the clinic." for i in range(60))
    text = f"# Clinic\n\n## Parking\n\n{body}\n\n## Hours\n\nOpen eight to six."
    chunks = chunk_text(text, "clinic.md", chunk_chars=300, overlap=60)
    assert all(len(c.text) <= 300 for c in chunks)
    assert [c.ordinal for c in chunks] == list(range(len(chunks)))
    parking = [c for c in chunks if c.text.startswith("Clinic > Parking\n")]
    assert len(parking) > 3 and chunks[-1].text == "Clinic > Hours\nOpen eight to six."
    # consecutive chunks of a section overlap, so a fact on a boundary is whole in one
    first, second = parking[0].text, parking[1].text.removeprefix("Clinic > Parking\n")
    assert second.split(" ")[0] in first
    joined = " ".join(c.text for c in parking)
    assert all(f"Sentence number {i} " in joined for i in range(60))


def test_a_word_longer_than_a_chunk_is_cut() -> None:
    chunks = chunk_text("x" * 1000, "a.txt", chunk_chars=300, overlap=0)
    assert all(len(c.text) <= 300 for c in chunks) and sum(len(c.text) for c in chunks) == 1000


@pytest_asyncio.fixture(loop_scope="session")
async def site() -> AsyncIterator[str]:
    async def page(request: web.Request) -> web.Response:
        return web.Response(text="<p>Open eight to six.</p>", content_type="text/html")

    async def moved(request: web.Request) -> web.Response:
        raise web.HTTPFound("/faq")

    app = web.Application()
    app.router.add_get("/faq", page)
    app.router.add_get("/old", moved)
    runner = web.AppRunner(app)
    await runner.setup()
    tcp = web.TCPSite(runner, "127.0.0.1", 0)
    await tcp.start()
    port = tcp._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"http://127.0.0.1:{port}"
    await runner.cleanup()


async def test_a_url_is_fetched_through_the_ssrf_guard(site: str, tmp_path: Path) -> None:
    src = KnowledgeSource(url=f"{site}/old")
    with pytest.raises(SourceError, match=r"127.0.0.1.*RINGFLOW_HTTP_ALLOW_PRIVATE"):
        await read_source(src, tmp_path)  # a private address: refused by default
    kind, data = await read_source(src, tmp_path, allow_private=True)  # redirected to /faq
    assert kind == "html" and b"Open eight to six." in data


async def test_a_missing_file_names_itself(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match=r"'nope.md'"):
        await read_source(KnowledgeSource(file="nope.md"), tmp_path)
