"""The ``ringflow`` command as the user runs it: a subprocess, its exit code and output."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from tests.support.paths import ROOT


async def ringflow(
    env: dict[str, str], *args: str, cwd: Path = ROOT, timeout: float = 120
) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``python -m ringflow.cli ARGS`` run in ``cwd``."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "ringflow.cli",
        *args,
        env=env,
        cwd=cwd,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def one_error_line(err: str) -> str:
    """``err`` is one ``error: ...`` line and no traceback; that line."""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    return lines[0]
