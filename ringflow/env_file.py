"""``.env`` files: settings for a project directory without exporting them in every shell.

Every ``ringflow`` command first reads ``.env`` in the working directory (or the file
``RINGFLOW_ENV_FILE`` names) into the process environment, so one file serves Ringflow's
``RINGFLOW_*`` settings and the variables other libraries read themselves (``TEMPORAL_*``
for Temporal's client config, ``OPENAI_API_KEY``, ``LIVEKIT_*``, ``OTEL_*``). A variable
already set in the environment wins over the file: a deployment's environment is never
changed by a stray ``.env``. Parsing is python-dotenv's (``KEY=value``, quotes,
``export KEY=value``, comments).
"""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT = ".env"


class EnvFileError(ValueError):
    """The ``.env`` file named by ``RINGFLOW_ENV_FILE`` cannot be read."""


def load_env_file(environ: dict[str, str] | None = None) -> Path | None:
    """Load the project's ``.env`` into ``os.environ`` (existing variables win); the file read."""
    env = os.environ if environ is None else environ
    named = env.get("RINGFLOW_ENV_FILE")
    path = Path(named) if named else Path(DEFAULT)
    if not path.is_file():
        if named:
            raise EnvFileError(f"RINGFLOW_ENV_FILE={named}: no such file")
        return None
    from dotenv import dotenv_values

    try:
        values = dotenv_values(path)
    except (OSError, UnicodeDecodeError) as err:
        raise EnvFileError(f"{path}: cannot be read: {err}") from None
    for key, value in values.items():
        if value is not None and key not in env:
            env[key] = value
    return path
