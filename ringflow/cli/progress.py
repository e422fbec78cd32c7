"""Progress of long CLI work (a batch of simulated calls, a simulated campaign) on the terminal.

Shown on stderr, and only when stderr is a terminal and the command was not asked for
``--json`` (``quiet``): the results stay on stdout untouched, and a pipe, a log file, CI or
a program reading the JSON gets no control characters. One line, rewritten in place:
``[3/10] reschedule.yaml ok``, ``[40/120] contacts done (reached 31, exhausted 9)``.
"""

from __future__ import annotations

import sys
from typing import TextIO


class Progress:
    """``step(label, ok)`` after each item of ``total``; ``done()`` ends the line."""

    def __init__(self, total: int, what: str, stream: TextIO | None = None, *, quiet: bool = False) -> None:
        self.total = total
        self.what = what
        self.count = 0
        self.failed = 0
        self.stream = sys.stderr if stream is None else stream
        self.shown = not quiet and self.total > 1 and self.stream.isatty()

    def update(self, count: int, label: str) -> None:
        """Work measured rather than counted (a campaign's contacts done so far)."""
        self.count = count
        if self.shown:
            self.stream.write(f"\r\x1b[2K[{count}/{self.total}] {label}")
            self.stream.flush()

    def step(self, label: str, ok: bool) -> None:
        self.count += 1
        self.failed += 0 if ok else 1
        if self.shown:
            line = f"[{self.count}/{self.total}] {label} {'ok' if ok else 'FAILED'}"
            self.stream.write(f"\r\x1b[2K{line}")
            self.stream.flush()

    def done(self) -> None:
        if self.shown:
            failed = f", {self.failed} failed" if self.failed else ""
            self.stream.write(f"\r\x1b[2K{self.count} {self.what}{failed}\n")
            self.stream.flush()
