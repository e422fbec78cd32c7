"""``python -m ringflow.cli``: the ``ringflow`` command."""

from ringflow.cli import main

main()
