"""A knowledge source's text, read at ``ringflow kb ingest`` time, and cut into chunks.

Files are read relative to the flow file; URLs are fetched once, through the same SSRF
guard as the HTTP tool (``activities/netguard.py``: every address the host resolves to must
be public unless ``RINGFLOW_HTTP_ALLOW_PRIVATE``, and the connection goes to the vetted
address). Each type becomes plain text the way a caller's question would match it:
Markdown keeps its headings (a chunk says which section it is from), HTML loses its tags,
scripts and styles, a PDF is its pages' text, and a CSV row becomes ``column: value`` pairs,
one row a line, so a price list's row is found by what its columns say.

Chunks are about ``chunk_chars`` long, cut at paragraph, then sentence, then word
boundaries, with ``overlap`` characters of the previous chunk repeated so a fact on a
boundary is whole in one of them.
"""

from __future__ import annotations

import csv
import html.parser
import io
import re
from dataclasses import dataclass
from pathlib import Path

import httpx

from ringflow.activities.netguard import BlockedDestination, ResolutionError, vet_url
from ringflow.callflow.knowledge import DocumentType, KnowledgeSource
from ringflow.callflow.validate_knowledge import EXTENSIONS

MAX_DOCUMENT_BYTES = 20_000_000
MAX_REDIRECTS = 5
CHUNK_CHARS = 800
OVERLAP_CHARS = 120
_CONTENT_TYPES = {
    "text/markdown": "markdown",
    "text/x-markdown": "markdown",
    "text/plain": "text",
    "text/html": "html",
    "application/xhtml+xml": "html",
    "application/pdf": "pdf",
    "text/csv": "csv",
}


class SourceError(Exception):
    """A source cannot be read; the message names it and says why."""


@dataclass(frozen=True)
class Chunk:
    source: str  # the source's label, as passages cite it
    ordinal: int  # its place in the source, from 0
    text: str


# --- reading


async def read_source(src: KnowledgeSource, base_dir: Path, allow_private: bool = False) -> tuple[str, bytes]:
    """(the document type, its bytes)."""
    if src.file is not None:
        path = base_dir / src.file
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise SourceError(f"knowledge source '{src.file}': {exc.strerror or exc}") from None
        kind = src.type or EXTENSIONS.get(path.suffix.lower())
        if kind is None:
            raise SourceError(f"knowledge source '{src.file}': say its type (markdown, text, pdf, html, csv)")
        return kind, data
    return await fetch_url(src, allow_private)


async def fetch_url(src: KnowledgeSource, allow_private: bool) -> tuple[str, bytes]:
    url = src.url or ""
    for _hop in range(MAX_REDIRECTS + 1):
        try:
            target = await vet_url(url, allow_private=allow_private)
        except (BlockedDestination, ResolutionError, ValueError) as exc:
            raise SourceError(f"knowledge source '{src.url}': {exc}") from None
        headers = {"Host": target.host_header(), "Accept": "text/*, application/pdf, */*;q=0.5"}
        extensions = {"sni_hostname": target.host} if target.url.scheme == "https" else {}
        async with httpx.AsyncClient(timeout=30, trust_env=False, follow_redirects=False) as client:
            request = client.build_request(
                "GET", target.pinned_url(target.ips[0]), headers=headers, extensions=extensions
            )
            try:
                response = await client.send(request, stream=True)
                try:
                    body = bytearray()
                    async for part in response.aiter_bytes():
                        body += part
                        if len(body) > MAX_DOCUMENT_BYTES:
                            raise SourceError(
                                f"knowledge source '{src.url}': larger than {MAX_DOCUMENT_BYTES} bytes"
                            )
                finally:
                    await response.aclose()
            except httpx.HTTPError as exc:
                raise SourceError(f"knowledge source '{src.url}': {type(exc).__name__}: {exc}") from None
        if response.status_code in (301, 302, 303, 307, 308) and "location" in response.headers:
            url = str(target.url.join(response.headers["location"]))
            continue
        if response.status_code >= 300:
            raise SourceError(f"knowledge source '{src.url}': the server answered {response.status_code}")
        ctype = response.headers.get("content-type", "").split(";")[0].strip().lower()
        kind = src.type or _CONTENT_TYPES.get(ctype) or EXTENSIONS.get(Path(target.url.path).suffix.lower())
        if kind is None:
            raise SourceError(
                f"knowledge source '{src.url}': content type '{ctype}' is not one Ringflow reads"
            )
        return kind, bytes(body)
    raise SourceError(f"knowledge source '{src.url}': more than {MAX_REDIRECTS} redirects")


# --- into text


class _HtmlText(html.parser.HTMLParser):
    SKIP = frozenset({"script", "style", "noscript", "template", "head"})
    BLOCK = frozenset(
        {"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "section", "article", "table"}
    )

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.skipping = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self.SKIP:
            self.skipping += 1
        elif tag in self.BLOCK:
            self.parts.append("\n\n" if tag.startswith("h") or tag == "p" else "\n")
            if tag.startswith("h") and len(tag) == 2:
                self.parts.append("#" * int(tag[1]) + " ")

    def handle_endtag(self, tag: str) -> None:
        if tag in self.SKIP:
            self.skipping = max(0, self.skipping - 1)
        elif tag in self.BLOCK:
            self.parts.append("\n\n" if tag.startswith("h") or tag == "p" else "\n")

    def handle_data(self, data: str) -> None:
        if not self.skipping:
            self.parts.append(data)


def _decode(data: bytes) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return data.decode("latin-1")


def document_text(kind: DocumentType | str, data: bytes, label: str) -> str:
    """The document's text: Markdown-like (``#`` headings, blank lines between paragraphs)."""
    if kind in ("markdown", "text"):
        return _decode(data)
    if kind == "html":
        parser = _HtmlText()
        parser.feed(_decode(data))
        parser.close()
        text = "".join(parser.parts)
        return re.sub(r"[ \t]+", " ", text)
    if kind == "csv":
        rows = list(csv.reader(io.StringIO(_decode(data))))
        if not rows:
            return ""
        head = [h.strip() for h in rows[0]]
        lines = []
        for row in rows[1:]:
            pairs = [
                f"{h or f'column {i + 1}'}: {v.strip()}"
                for i, (h, v) in enumerate(zip(head, row, strict=False))
                if v.strip()
            ]
            if pairs:
                lines.append("; ".join(pairs))
        return "\n\n".join(lines)
    if kind == "pdf":
        try:
            import pypdf
        except ImportError:
            raise SourceError(
                f"knowledge source '{label}': reading PDF needs pypdf: pip install 'ringflow[kb]'"
            ) from None
        try:
            reader = pypdf.PdfReader(io.BytesIO(data))
            return "\n\n".join((page.extract_text() or "").strip() for page in reader.pages)
        except Exception as exc:  # pypdf raises many kinds for a damaged file
            raise SourceError(f"knowledge source '{label}': not a readable PDF ({exc})") from None
    raise SourceError(f"knowledge source '{label}': unknown type '{kind}'")


# --- into chunks

_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")


def _sections(text: str) -> list[tuple[str, str]]:
    """(heading trail, body) pairs: a chunk starts with the headings it sits under."""
    out: list[tuple[str, str]] = []
    trail: list[tuple[int, str]] = []
    body: list[str] = []

    def flush() -> None:
        joined = "\n".join(body).strip()
        if joined:
            out.append((" > ".join(t for _, t in trail), joined))
        body.clear()

    for line in text.splitlines():
        m = _HEADING.match(line.strip())
        if m:
            flush()
            level = len(m.group(1))
            trail = [t for t in trail if t[0] < level] + [(level, m.group(2).strip())]
        else:
            body.append(line)
    flush()
    return out


def _pieces(text: str, limit: int) -> list[str]:
    """``text`` cut into pieces of at most ``limit`` characters: at paragraphs, then
    sentences, then words (a word longer than ``limit`` is cut where it must be)."""
    paragraphs = [p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()]
    out: list[str] = []
    for p in paragraphs:
        p = re.sub(r"\s+", " ", p)
        if len(p) <= limit:
            out.append(p)
            continue
        for sentence in re.split(r"(?<=[.!?])\s+", p):
            while len(sentence) > limit:
                cut = sentence.rfind(" ", 0, limit)
                cut = cut if cut > limit // 2 else limit
                out.append(sentence[:cut].strip())
                sentence = sentence[cut:].strip()
            if sentence:
                out.append(sentence)
    return out


def chunk_text(
    text: str, source: str, chunk_chars: int = CHUNK_CHARS, overlap: int = OVERLAP_CHARS
) -> list[Chunk]:
    """The document's chunks, in order; each starts with its section's headings."""
    chunks: list[str] = []
    for trail, body in _sections(text):
        prefix = f"{trail}\n" if trail else ""
        room = max(100, chunk_chars - len(prefix))
        current = ""
        for piece in _pieces(body, room):
            if current and len(current) + 1 + len(piece) > room:
                chunks.append(prefix + current)
                tail = current[-overlap:] if overlap else ""
                cut = tail.find(" ")
                tail = tail[cut + 1 :] if cut >= 0 else tail
                current = f"{tail} {piece}".strip() if tail and len(tail) + 1 + len(piece) <= room else piece
            else:
                current = f"{current} {piece}".strip() if current else piece
        if current:
            chunks.append(prefix + current)
    return [Chunk(source=source, ordinal=i, text=c) for i, c in enumerate(chunks)]
