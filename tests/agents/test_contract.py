"""The agent ↔ workflow contract: the agent process imports the contract and the client,
never the workflow and, through it, the activities' HTTP and database clients."""

from __future__ import annotations

import subprocess
import sys

from tests.support.paths import ROOT


def test_the_agent_imports_neither_the_workflow_nor_httpx() -> None:
    code = (
        "import sys, ringflow.agents.controller, ringflow.agents.runner, ringflow.agents.signals\n"
        "import ringflow.agents.outbox\n"
        "names = ('ringflow.workflows.call', 'httpx', 'ringflow.activities.webhook', 'sqlmodel')\n"
        "print(' '.join(m for m in names if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "", f"the agent imports {out.stdout.strip()}"
