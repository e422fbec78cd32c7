"""Where the tests find the repository's files, whichever folder under ``tests/`` asks.

A test names ``ROOT / "examples" / ...`` or ``TESTS / "fixtures" / ...`` instead of counting
``Path(__file__).parents``, so moving a test between folders changes none of its paths.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the checkout: pyproject.toml, examples/, infra/
TESTS = ROOT / "tests"
