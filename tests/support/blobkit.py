"""Real GCS and Azure Blob servers for the recording tests, on free loopback ports:
``gcp-storage-emulator`` (PyPI, in-memory) and Azurite (npm: ``bash .ci/run`` installs it
under ``.ci/azurite``). Google's and Azure's own client libraries talk to them as to the
clouds, so a recording written by the LiveKit fake's egress and deleted by ``call forget``
goes through the same code as in production; only the address differs."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.paths import ROOT

# Azurite's well-known development account (published in its documentation: not a secret)
AZURE_ACCOUNT = "devstoreaccount1"
AZURE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
AZURITE = ROOT / ".ci" / "azurite" / "node_modules" / ".bin" / "azurite-blob"
START_S = 90.0  # a bound for a server that never listens, not a speed requirement


def _wait_listening(port: int, proc: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode} before listening")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)  # the poll's period
    raise TimeoutError(f"nothing listened on 127.0.0.1:{port} within {START_S:.0f} s")


@dataclass(frozen=True)
class GcsServer:
    endpoint: str

    def client(self) -> Any:
        from google.auth.credentials import AnonymousCredentials
        from google.cloud.storage import Client as StorageClient

        return StorageClient(
            project="ringflow-test",
            credentials=AnonymousCredentials(),
            client_options={"api_endpoint": self.endpoint},
        )

    def keys(self, bucket: str) -> list[str]:
        return sorted(b.name for b in self.client().list_blobs(bucket))


@contextmanager
def gcs_server() -> Iterator[GcsServer]:
    from gcp_storage_emulator.server import create_server

    from ringflow.devstack import free_port

    port = free_port()
    server = create_server("127.0.0.1", port, in_memory=True)
    server.start()
    try:
        _wait_listening(port)
        yield GcsServer(f"http://127.0.0.1:{port}")
    finally:
        server.stop()


@dataclass(frozen=True)
class AzureServer:
    endpoint: str  # the account's blob endpoint, as BlobServiceClient takes it

    def client(self) -> Any:
        from azure.storage.blob import BlobServiceClient

        return BlobServiceClient(
            self.endpoint, credential={"account_name": AZURE_ACCOUNT, "account_key": AZURE_KEY}
        )

    def keys(self, container: str) -> list[str]:
        return sorted(b.name for b in self.client().get_container_client(container).list_blobs())


def azurite_command() -> str | None:
    """Azurite's blob server: ``RINGFLOW_TEST_AZURITE``, the one ``.ci/run`` installs, or on PATH."""
    given = os.environ.get("RINGFLOW_TEST_AZURITE")
    if given:
        return given
    if AZURITE.exists():
        return str(AZURITE)
    return shutil.which("azurite-blob")


@contextmanager
def azurite(command: str, folder: Path) -> Iterator[AzureServer]:
    from ringflow.devstack import free_port

    port = free_port()
    args = [command, "--blobHost", "127.0.0.1", "--blobPort", str(port), "--location", str(folder)]
    args += ["--skipApiVersionCheck", "--loose", "--silent"]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        _wait_listening(port, proc)
        yield AzureServer(f"http://127.0.0.1:{port}/{AZURE_ACCOUNT}")
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
