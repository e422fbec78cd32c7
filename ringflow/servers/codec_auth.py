"""Who may use the codec server: the Temporal UI's signed-in users, and the CLI's static token.

The Temporal UI cannot send a shared secret: with ``TEMPORAL_CODEC_PASS_ACCESS_TOKEN=true``
it forwards the signed-in user's OIDC access token (a JWT from the identity provider) as
``Authorization: Bearer``. So a request is let in when its bearer token is the static
``RINGFLOW_CODEC_SERVER_TOKEN`` (the ``temporal`` CLI's ``--codec-auth``, scripts), or a JWT
that the identity provider signed (a key of its JWKS, fetched from
``RINGFLOW_CODEC_OIDC_JWKS_URL`` or the issuer's discovery document) for this issuer and
audience, unexpired, and, when ``RINGFLOW_CODEC_OIDC_GROUP`` is set, naming that group in
its groups claim. The JWKS is cached (5 minutes); a token signed with a key id the cache does not know
refetches it (at most every 30 s), so an identity provider that rotates its keys is
followed without a restart, and a key it removed stops working at the next fetch.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field

import jwt

# Asymmetric algorithms only: an HS256 token would be checked against a public key as if it
# were a shared secret.
ALGORITHMS = ("RS256", "RS384", "RS512", "ES256", "ES384", "PS256", "PS384", "PS512", "EdDSA")
JWKS_TIMEOUT_S = 5.0


class Unauthorized(Exception):
    """The request may not use the codec server; the message says why (no token contents)."""


@dataclass
class OidcVerifier:
    """Checks an identity provider's JWTs: signature (JWKS), issuer, audience, expiry, group."""

    issuer: str
    audience: str
    jwks_url: str | None = None
    group: str | None = None
    groups_claim: str = "groups"
    leeway_s: float = 30.0
    jwks_cache_s: float = 300.0  # how long a fetched JWKS is trusted (a removed key works until then)
    refetch_cooldown_s: float = 30.0  # at most one refetch for an unknown key id per this long
    _client: jwt.PyJWKClient | None = field(default=None, init=False, repr=False)

    def _jwks(self) -> jwt.PyJWKClient:
        if self._client is None:
            url = self.jwks_url or _discover_jwks_url(self.issuer)
            # The JWKS cache only (no per-key cache: that never expires, so a key the
            # provider removed would be trusted forever).
            self._client = jwt.PyJWKClient(
                url,
                cache_keys=False,
                lifespan=self.jwks_cache_s,
                timeout=JWKS_TIMEOUT_S,
                cooldown_duration=self.refetch_cooldown_s,
            )
        return self._client

    def verify(self, token: str) -> dict[str, object]:
        """The token's claims, or :class:`Unauthorized` (blocking: JWKS fetches are HTTP)."""
        try:
            key = self._jwks().get_signing_key_from_jwt(token)
        except jwt.PyJWKClientConnectionError as err:
            raise Unauthorized(f"cannot fetch the identity provider's keys: {err}") from None
        except (jwt.PyJWKClientError, jwt.DecodeError) as err:
            raise Unauthorized(f"token not signed by a key of the identity provider: {err}") from None
        try:
            claims: dict[str, object] = jwt.decode(
                token,
                key.key,
                algorithms=list(ALGORITHMS),
                audience=self.audience,
                issuer=self.issuer,
                leeway=self.leeway_s,
                options={"require": ["exp", "iss", "aud"]},
            )
        except jwt.ExpiredSignatureError:
            raise Unauthorized("token expired") from None
        except jwt.InvalidAudienceError:
            raise Unauthorized("token is for another audience") from None
        except jwt.InvalidIssuerError:
            raise Unauthorized("token from another issuer") from None
        except jwt.InvalidTokenError as err:
            raise Unauthorized(f"invalid token: {err}") from None
        if self.group is not None:
            groups = claims.get(self.groups_claim)
            if isinstance(groups, str):
                groups = groups.split()
            if not isinstance(groups, list) or self.group not in groups:
                raise Unauthorized(f"token's {self.groups_claim!r} claim does not include the required group")
        return claims


def _discover_jwks_url(issuer: str) -> str:
    """``jwks_uri`` of the issuer's OpenID Connect discovery document."""
    url = issuer.rstrip("/") + "/.well-known/openid-configuration"
    try:
        with urllib.request.urlopen(url, timeout=JWKS_TIMEOUT_S) as resp:
            return str(json.load(resp)["jwks_uri"])
    except (OSError, ValueError, KeyError) as err:
        raise Unauthorized(f"cannot read the identity provider's discovery document {url}: {err}") from None


@dataclass
class CodecAuth:
    """A request's bearer token against the static token and the identity provider."""

    tokens: Sequence[str] = ()
    oidc: OidcVerifier | None = None

    async def check(self, header: str) -> None:
        """Return when ``header`` (``Authorization``) is allowed, else raise :class:`Unauthorized`."""
        scheme, _, value = header.partition(" ")
        value = value.strip()
        if scheme.lower() != "bearer" or not value:
            raise Unauthorized("missing bearer token")
        if any(hmac.compare_digest(value.encode(), t.encode()) for t in self.tokens):
            return
        if self.oidc is None or value.count(".") != 2:
            raise Unauthorized("wrong bearer token")
        await asyncio.to_thread(self.oidc.verify, value)
