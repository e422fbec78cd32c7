"""``python -m ringflow.cli``: the ``ringflow`` command."""

from ringflow.cli import entry_point

entry_point()
