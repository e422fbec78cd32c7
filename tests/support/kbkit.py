"""Knowledge base helpers: a PDF written by hand (no PDF writer among the dependencies) and
the clinic knowledge flow of tests/fixtures/kb."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.support.paths import ROOT

FIXTURES = ROOT / "examples" / "flows" / "clinic_knowledge"  # the example flow's documents


def make_pdf(lines: list[str]) -> bytes:
    """A one-page PDF whose text is ``lines`` (Helvetica), with a correct cross-reference table."""
    text = (
        "BT /F1 12 Tf 72 720 Td 14 TL "
        + " ".join(
            "(" + ln.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)") + ") '" for ln in lines
        )
        + " ET"
    )
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n%s\nendstream" % (len(text), text.encode("latin-1")),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for i, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (i, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


CLINIC_FLOW = """\
flow: {name}
role: You are the front desk of Northside Clinic.
knowledge:
  - file: clinic.md
  - file: prices.csv
  - file: insurance.html
  - file: dentures.pdf
    name: dentures
nodes:
  answer:
    task: Answer the caller's questions from the knowledge base, then say goodbye.
    functions:
      - name: search_knowledge
        knowledge: {{top_k: 2, max_bytes: 1200}}
      - name: finish
        description: The caller has no more questions.
        transition_only: true
        transition_to: goodbye
  goodbye:
    type: end
    task: Say goodbye.
"""


def clinic_flow(dest: Path, name: str = "kb_clinic") -> Path:
    """The clinic's knowledge flow and its four documents (Markdown, CSV, HTML, PDF) in ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    for f in FIXTURES.iterdir():
        if f.name != "flow.yaml":
            shutil.copy(f, dest / f.name)
    (dest / "dentures.pdf").write_bytes(make_pdf(["Dentures are repaired within three working days."]))
    path = dest / "flow.yaml"
    path.write_text(CLINIC_FLOW.format(name=name))
    return path
