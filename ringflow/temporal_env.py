"""Where and how to reach Temporal: Temporal's own client configuration, then Ringflow's.

Production Temporal (self-hosted behind TLS, or Temporal Cloud) is configured the way every
Temporal SDK and the ``temporal`` CLI are: ``temporalio.envconfig`` reads a TOML profile
file (``TEMPORAL_CONFIG_FILE``, ``TEMPORAL_PROFILE``) and the ``TEMPORAL_*`` variables
(``TEMPORAL_ADDRESS``, ``TEMPORAL_NAMESPACE``, ``TEMPORAL_API_KEY``, ``TEMPORAL_TLS``,
``TEMPORAL_TLS_SERVER_CA_CERT_PATH``, ``TEMPORAL_TLS_CLIENT_CERT_PATH``,
``TEMPORAL_TLS_CLIENT_KEY_PATH``, ``TEMPORAL_TLS_SERVER_NAME``, ``TEMPORAL_GRPC_META_*``),
so one Secret serves Ringflow and the operator's own tools. Ringflow's
``RINGFLOW_TEMPORAL_ADDRESS``/``RINGFLOW_TEMPORAL_NAMESPACE`` (and ``--address`` flags)
still work and win over the profile when set; TLS and the API key always come from the
profile. This module imports nothing of Ringflow's, so settings can use it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported where a profile is loaded: ``ringflow --help`` needs no SDK
    from temporalio.envconfig import ClientConfigProfile

DEFAULT_ADDRESS = "127.0.0.1:7233"
DEFAULT_NAMESPACE = "default"


class TemporalConfigError(ValueError):
    """The Temporal client configuration (profile file or ``TEMPORAL_*``) is unusable."""


def load_profile(env: Mapping[str, str] | None = None) -> ClientConfigProfile:
    """The active profile with ``TEMPORAL_*`` overrides applied; errors name the source."""
    env = os.environ if env is None else env
    config_file = env.get("TEMPORAL_CONFIG_FILE")
    if config_file and not Path(config_file).is_file():
        raise TemporalConfigError(f"TEMPORAL_CONFIG_FILE={config_file}: no such file")
    from temporalio.envconfig import ClientConfigProfile

    try:
        return ClientConfigProfile.load(override_env_vars=dict(env))
    except Exception as err:  # the bridge's ConfigError is not importable by a stable name
        where = f"TEMPORAL_CONFIG_FILE={config_file}" if config_file else "the Temporal client config"
        raise TemporalConfigError(f"{where}: {err}") from None


def connect_options(
    address: str | None = None,
    namespace: str | None = None,
    *,
    envconfig: bool = True,
    env: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Keyword arguments for ``Client.connect``: the profile, then ``address``/``namespace``.

    ``envconfig=False`` ignores the profile (the embedded dev stack is plain local gRPC even
    when the shell is set up for Temporal Cloud).
    """
    options: dict[str, Any] = {}
    if envconfig:
        profile = load_profile(env)
        try:
            options = dict(profile.to_client_connect_config())
        except OSError as err:  # a certificate or key file that cannot be read
            raise TemporalConfigError(f"Temporal TLS settings: {err}") from None
    if address:
        options["target_host"] = address
    options.setdefault("target_host", DEFAULT_ADDRESS)
    if namespace:
        options["namespace"] = namespace
    options.setdefault("namespace", DEFAULT_NAMESPACE)
    return options


def describe(options: Mapping[str, Any]) -> str:
    """Address, namespace and security of a connection, with no secret in it (for logs)."""
    tls = options.get("tls")
    security = "plaintext"
    if tls:
        mutual = getattr(tls, "client_cert", None) is not None
        security = "mTLS" if mutual else "TLS"
    if options.get("api_key"):
        security += " + API key"
    return f"{options['target_host']} (namespace {options['namespace']}, {security})"
