"""Progress of long CLI work: on a terminal's stderr, one line rewritten; never in a pipe."""

from __future__ import annotations

import io

from ringflow.cli.progress import Progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_sees_each_step_and_a_summary() -> None:
    tty = Terminal()
    progress = Progress(3, "scripts simulated", stream=tty)
    for label, ok in (("a.yaml", True), ("b.yaml", False), ("c.yaml", True)):
        progress.step(label, ok)
    progress.done()
    shown = tty.getvalue()
    assert "[1/3] a.yaml ok" in shown and "[2/3] b.yaml FAILED" in shown and "[3/3] c.yaml ok" in shown
    assert shown.endswith("3 scripts simulated, 1 failed\n")


def test_a_pipe_or_a_single_item_gets_nothing() -> None:
    pipe = io.StringIO()
    progress = Progress(5, "scripts simulated", stream=pipe)
    progress.step("a.yaml", True)
    progress.done()
    assert pipe.getvalue() == ""
    tty = Terminal()
    single = Progress(1, "scripts simulated", stream=tty)
    single.step("a.yaml", True)
    single.done()
    assert tty.getvalue() == ""


def test_json_output_keeps_the_terminal_quiet() -> None:
    """``--json`` is for programs: no progress line, terminal or not."""
    tty = Terminal()
    progress = Progress(3, "scripts simulated", stream=tty, quiet=True)
    progress.step("a.yaml", True)
    progress.update(2, "contacts done")
    progress.done()
    assert tty.getvalue() == ""


def test_measured_progress_shows_the_count_it_is_given() -> None:
    """A simulated campaign's contacts done so far: the count read from its rows."""
    tty = Terminal()
    progress = Progress(16, "contacts done", stream=tty)
    progress.update(5, "contacts done (failed 2, reached 3)")
    progress.update(16, "contacts done (failed 9, reached 7)")
    progress.done()
    shown = tty.getvalue()
    assert (
        "[5/16] contacts done (failed 2, reached 3)" in shown and "[16/16] contacts done (failed 9" in shown
    )
    assert shown.endswith("16 contacts done\n")
