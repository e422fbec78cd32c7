"""A real S3-compatible server for the tests: moto's server mode (its own HTTP server on a
free loopback port, the S3 API as boto3 and LiveKit Egress speak it), not a mock of boto."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

ACCESS_KEY = "testing-access"  # moto accepts any key; nothing here is a real credential
SECRET = "testing-secret"
REGION = "us-east-1"


@dataclass(frozen=True)
class S3Server:
    endpoint: str

    def client(self) -> Any:
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET,
            region_name=REGION,
            config=Config(s3={"addressing_style": "path"}),
        )

    def keys(self, bucket: str) -> list[str]:
        listed = self.client().list_objects_v2(Bucket=bucket)
        return sorted(o["Key"] for o in listed.get("Contents", []))

    def read(self, bucket: str, key: str) -> bytes:
        return bytes(self.client().get_object(Bucket=bucket, Key=key)["Body"].read())


@contextmanager
def s3_server() -> Iterator[S3Server]:
    from moto.server import ThreadedMotoServer

    from ringflow.devstack import free_port

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield S3Server(f"http://127.0.0.1:{port}")
    finally:
        server.stop()
