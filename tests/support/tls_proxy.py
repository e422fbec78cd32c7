"""A throwaway PKI and a TLS-terminating proxy on loopback, in front of the dev server.

``temporal server start-dev`` has no TLS options (its ``--help`` lists none), so TLS and
mTLS tests put this proxy between the client and the plaintext dev server: it terminates
TLS (optionally requiring a client certificate signed by the test CA) and pipes the bytes
of the HTTP/2 connection through unchanged. The client side is the real SDK with real
certificates; only where TLS ends differs from a TLS-enabled server.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path  # a CA that signed nothing here: trusting it alone must fail


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )


def _ca(cn: str) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(_name(cn))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return key, cert


def _leaf(
    cn: str, ca_key: ec.EllipticCurvePrivateKey, ca: x509.Certificate, *, server: bool
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
    )
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
    return key, builder.sign(ca_key, hashes.SHA256())


def make_pki(folder: Path) -> Pki:
    ca_key, ca = _ca("ringflow test CA")
    s_key, s_cert = _leaf("localhost", ca_key, ca, server=True)
    c_key, c_cert = _leaf("ringflow-worker", ca_key, ca, server=False)
    _, other = _ca("unrelated CA")
    pem = serialization.Encoding.PEM
    pki = Pki(
        folder / "ca.pem",
        folder / "server.pem",
        folder / "server.key",
        folder / "client.pem",
        folder / "client.key",
        folder / "other-ca.pem",
    )
    pki.ca.write_bytes(ca.public_bytes(pem))
    pki.other_ca.write_bytes(other.public_bytes(pem))
    pki.server_cert.write_bytes(s_cert.public_bytes(pem))
    pki.client_cert.write_bytes(c_cert.public_bytes(pem))
    _write_key(s_key, pki.server_key)
    _write_key(c_key, pki.client_key)
    return pki


class TlsProxy:
    """``127.0.0.1:<port>`` speaking TLS (mTLS if ``require_client_cert``) to ``upstream``."""

    def __init__(self, upstream: str, pki: Pki, *, require_client_cert: bool = False) -> None:
        self.upstream_host, port = upstream.rsplit(":", 1)
        self.upstream_port = int(port)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(pki.server_cert, pki.server_key)
        ctx.set_alpn_protocols(["h2"])
        if require_client_cert:
            ctx.verify_mode = ssl.CERT_REQUIRED
            ctx.load_verify_locations(pki.ca)
        self.ctx = ctx
        self.handshakes_ok = 0
        self.peer_names: list[str] = []
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def address(self) -> str:
        assert self._server is not None
        return f"127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def __aenter__(self) -> TlsProxy:
        self._server = await asyncio.start_server(
            self._serve, "127.0.0.1", 0, ssl=self.ctx, ssl_handshake_timeout=10
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.handshakes_ok += 1
        peer = writer.get_extra_info("peercert")
        if peer:
            self.peer_names.append(dict(x[0] for x in peer["subject"])["commonName"])
        try:
            up_reader, up_writer = await asyncio.open_connection(self.upstream_host, self.upstream_port)
        except OSError:
            writer.close()
            return
        for src, dst in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.ensure_future(_pipe(src, dst))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)


async def _pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
    try:
        while data := await src.read(65536):
            dst.write(data)
            await dst.drain()
    except (OSError, ssl.SSLError):
        pass
    finally:
        with contextlib.suppress(Exception):
            dst.close()
