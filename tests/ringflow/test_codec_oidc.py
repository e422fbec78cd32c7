"""The codec server lets in the Temporal UI's users by their identity provider's JWT.

The test plays the identity provider itself: a real HTTP server with an OpenID Connect
discovery document and a JWKS whose keys the test rotates, signing tokens with
``cryptography`` RSA keys through PyJWT. The codec server (real, over HTTP) must accept a
token for its issuer and audience, unexpired, naming the required group; refuse every
other; still take the static token the CLI sends; and follow a key rotation without a
restart (a new key is fetched on first sight, the removed one stops working).
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import jwt
import pytest
import pytest_asyncio
from aiohttp import web
from cryptography.hazmat.primitives.asymmetric import rsa
from google.protobuf import json_format
from temporalio.api.common.v1 import Payload, Payloads

from ringflow.codec import EncryptionCodec, generate_key, keyring_from_settings
from ringflow.devstack import free_port
from ringflow.servers.codec import build_app, start
from ringflow.servers.codec_auth import OidcVerifier
from ringflow.settings import Settings

AUDIENCE = "temporal-ui"
GROUP = "ringflow-ops"
STATIC = "cli-static-token"


@dataclass
class IdentityProvider:
    """Discovery document and JWKS over HTTP; ``keys`` is what the JWKS publishes now."""

    port: int = field(default_factory=free_port)
    keys: dict[str, rsa.RSAPrivateKey] = field(default_factory=dict)
    jwks_fetches: int = 0

    @property
    def issuer(self) -> str:
        return f"http://127.0.0.1:{self.port}/realms/ops"

    def new_key(self, kid: str) -> rsa.RSAPrivateKey:
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.keys[kid] = key
        return key

    def token(self, kid: str, key: rsa.RSAPrivateKey | None = None, **claims: Any) -> str:
        now = int(time.time())
        body = {"iss": self.issuer, "aud": AUDIENCE, "sub": "ops-1", "iat": now, "exp": now + 300}
        body["groups"] = [GROUP, "staff"]
        body.update(claims)
        body = {k: v for k, v in body.items() if v is not None}
        return jwt.encode(body, key or self.keys[kid], algorithm="RS256", headers={"kid": kid})

    async def discovery(self, _: web.Request) -> web.Response:
        return web.json_response({"issuer": self.issuer, "jwks_uri": f"{self.issuer}/certs"})

    async def jwks(self, _: web.Request) -> web.Response:
        self.jwks_fetches += 1
        published = []
        for kid, key in self.keys.items():
            jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
            published.append({**jwk, "kid": kid, "use": "sig", "alg": "RS256"})
        return web.json_response({"keys": published})


@pytest_asyncio.fixture
async def idp() -> AsyncIterator[IdentityProvider]:
    provider = IdentityProvider()
    app = web.Application()
    app.router.add_get("/realms/ops/.well-known/openid-configuration", provider.discovery)
    app.router.add_get("/realms/ops/certs", provider.jwks)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", provider.port).start()
    try:
        yield provider
    finally:
        await runner.cleanup()


@pytest_asyncio.fixture
async def codec_url(idp: IdentityProvider) -> AsyncIterator[tuple[str, EncryptionCodec]]:
    ring = keyring_from_settings(Settings(codec_keys=f"k1:{generate_key()}"))  # type: ignore[arg-type]
    assert ring is not None
    codec = EncryptionCodec(ring)
    # The JWKS is found through the issuer's discovery document, as in production; no
    # refetch cooldown, so the test needs no clock.
    oidc = OidcVerifier(issuer=idp.issuer, audience=AUDIENCE, group=GROUP, refetch_cooldown_s=0)
    port = free_port()
    runner = await start(build_app(codec, token=STATIC, cors_origins=[], oidc=oidc), "127.0.0.1", port)
    try:
        yield f"http://127.0.0.1:{port}", codec
    finally:
        await runner.cleanup()


async def _decode(base: str, codec: EncryptionCodec, token: str) -> httpx.Response:
    (sealed,) = await codec.encode([Payload(metadata={"encoding": b"json/plain"}, data=b'"secret"')])
    body = json_format.MessageToJson(Payloads(payloads=[sealed]))
    async with httpx.AsyncClient() as client:
        return await client.post(f"{base}/decode", content=body, headers={"Authorization": f"Bearer {token}"})


def _clear(resp: httpx.Response) -> bytes:
    assert resp.status_code == 200, resp.text
    return base64.b64decode(resp.json()["payloads"][0]["data"])


async def test_the_uis_jwt_and_the_static_token_decode(
    idp: IdentityProvider, codec_url: tuple[str, EncryptionCodec]
) -> None:
    base, codec = codec_url
    idp.new_key("kid-1")
    assert _clear(await _decode(base, codec, idp.token("kid-1"))) == b'"secret"'
    assert _clear(await _decode(base, codec, STATIC)) == b'"secret"'  # the CLI's --codec-auth


@pytest.mark.parametrize(
    ("claims", "why"),
    [
        ({"aud": "another-app"}, "another audience"),
        ({"iss": "http://127.0.0.1:9/realms/other"}, "another issuer"),
        ({"exp": int(time.time()) - 3600}, "expired"),
        ({"exp": None}, "exp"),
        ({"groups": ["staff"]}, "required group"),
    ],
)
async def test_tokens_for_someone_else_are_refused(
    idp: IdentityProvider, codec_url: tuple[str, EncryptionCodec], claims: dict[str, Any], why: str
) -> None:
    base, codec = codec_url
    idp.new_key("kid-1")
    resp = await _decode(base, codec, idp.token("kid-1", **claims))
    assert resp.status_code == 401 and why in resp.json()["error"], resp.text


async def test_forged_and_wrong_tokens_are_refused(
    idp: IdentityProvider, codec_url: tuple[str, EncryptionCodec]
) -> None:
    base, codec = codec_url
    idp.new_key("kid-1")
    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    forged = await _decode(base, codec, idp.token("kid-1", key=stranger))  # right kid, wrong key
    assert forged.status_code == 401, forged.text
    unknown = await _decode(base, codec, idp.token("kid-9", key=stranger))  # a key the IdP never had
    assert unknown.status_code == 401 and "not signed by a key" in unknown.json()["error"]
    assert (await _decode(base, codec, "not-the-token")).status_code == 401
    hs = jwt.encode(
        {"iss": idp.issuer, "aud": AUDIENCE, "exp": int(time.time()) + 60}, "x" * 32, headers={"kid": "kid-1"}
    )
    assert (await _decode(base, codec, hs)).status_code == 401  # no symmetric tokens
    async with httpx.AsyncClient() as client:
        exported = (await client.get(f"{base}/metrics")).text
    refused = [line for line in exported.splitlines() if line.startswith("ringflow_codec_requests_total{")]
    assert any('outcome="unauthorized"' in line and not line.endswith(" 0.0") for line in refused), refused


async def test_key_rotation_is_followed_without_a_restart(
    idp: IdentityProvider, codec_url: tuple[str, EncryptionCodec]
) -> None:
    base, codec = codec_url
    old = idp.new_key("kid-1")
    assert _clear(await _decode(base, codec, idp.token("kid-1")))
    fetches = idp.jwks_fetches
    assert _clear(await _decode(base, codec, idp.token("kid-1")))
    assert idp.jwks_fetches == fetches  # cached: one fetch serves many requests

    # The provider rotates: a new key signs, the old one is withdrawn from the JWKS.
    idp.new_key("kid-2")
    del idp.keys["kid-1"]
    assert _clear(await _decode(base, codec, idp.token("kid-2")))  # unknown kid: refetched
    assert idp.jwks_fetches == fetches + 1
    stale = await _decode(base, codec, idp.token("kid-1", key=old))
    assert stale.status_code == 401, "a key the provider withdrew still works"
