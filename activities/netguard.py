"""SSRF guard for the HTTP tool: which URLs a flow may make the worker fetch.

Flow URLs are templated with caller-influenced values (LLM arguments), so the worker must
not become a proxy into its own network. A URL passes when its scheme is http(s) and
*every* address its host resolves to is public. The caller then connects to the vetted
address itself (see ``http_tool``), so a DNS answer that changes between the check and the
connection (DNS rebinding) cannot redirect the request.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from dataclasses import dataclass

import httpx

ALLOWED_SCHEMES = frozenset({"http", "https"})
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


class BlockedDestination(Exception):
    """The URL may not be fetched; the message is safe to show to the LLM."""


class ResolutionError(Exception):
    """The host name did not resolve (possibly transient, so callers may retry)."""


@dataclass(frozen=True)
class VettedTarget:
    """A URL together with the vetted addresses it may be fetched from (in resolver order)."""

    url: httpx.URL
    host: str
    port: int
    ips: tuple[IPAddress, ...]

    def pinned_url(self, ip: IPAddress) -> httpx.URL:
        """The URL with its host replaced by one of the vetted addresses."""
        if ip not in self.ips:
            raise ValueError(f"{ip} was not vetted for {self.host}")
        return self.url.copy_with(host=str(ip))

    def host_header(self) -> str:
        default = 443 if self.url.scheme == "https" else 80
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == default else f"{host}:{self.port}"


def address_problem(ip: IPAddress) -> str | None:
    """Why this address is not public, or None when it is."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return address_problem(ip.ipv4_mapped)
        # 6to4 (2002::/16) and Teredo carry an IPv4 address that a relay may deliver to; a
        # private one inside is a way round the checks below (6to4 counts as global).
        for kind, inner in (("6to4", ip.sixtofour), *(("Teredo", v4) for v4 in ip.teredo or ())):
            if inner is not None and (problem := address_problem(inner)):
                return f"{kind} address embedding a {problem} IPv4 address"
    checks = (
        ("unspecified", ip.is_unspecified),
        ("loopback", ip.is_loopback),
        ("link-local", ip.is_link_local),
        ("multicast", ip.is_multicast),
        ("private", ip.is_private),
        ("site-local", isinstance(ip, ipaddress.IPv6Address) and ip.is_site_local),  # fec0::/10
        ("reserved", ip.is_reserved),
    )
    for name, hit in checks:
        if hit:
            return name
    # Catch-all for the special ranges not flagged above (e.g. 100.64.0.0/10, CGNAT).
    return None if ip.is_global else "non-global"


def parse_target(raw_url: str) -> tuple[httpx.URL, str, int]:
    """Check the URL's shape; return it parsed with its host and effective port."""
    try:
        url = httpx.URL(raw_url)
    except (httpx.InvalidURL, TypeError) as err:
        raise BlockedDestination(f"invalid URL: {err}") from None
    if url.scheme not in ALLOWED_SCHEMES:
        raise BlockedDestination(f"scheme {url.scheme or '(none)'!r} is not allowed")
    host = url.host
    if not host:
        raise BlockedDestination("URL has no host")
    port = url.port or (443 if url.scheme == "https" else 80)
    return url, host, port


async def resolve(host: str, port: int) -> list[IPAddress]:
    """All addresses of ``host`` (an IP literal resolves to itself)."""
    try:
        return [ipaddress.ip_address(host)]
    except ValueError:
        pass
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as err:
        raise ResolutionError(f"cannot resolve {host}: {err.strerror}") from None
    addresses: list[IPAddress] = []
    for _family, _type, _proto, _canon, sockaddr in infos:
        ip = ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0])  # drop an IPv6 zone id
        if ip not in addresses:
            addresses.append(ip)
    if not addresses:
        raise ResolutionError(f"cannot resolve {host}: no addresses")
    return addresses


def allowed_networks(items: list[str]) -> tuple[IPNetwork, ...]:
    """Addresses (``127.0.0.1``) and networks (``10.1.0.0/16``) let past the guard one by
    one, as a conversation script's ``allow_private`` lists them; ValueError naming the
    first item that is neither (a host name is not: what it resolves to may change)."""
    out: list[IPNetwork] = []
    for item in items:
        try:
            out.append(ipaddress.ip_network(str(item).strip(), strict=False))
        except ValueError:
            raise ValueError(
                f"{item!r} is not an IP address (127.0.0.1, ::1) or network (10.1.0.0/16); "
                "a host name is not allowed: list the addresses it resolves to"
            ) from None
    return tuple(out)


async def vet_url(
    raw_url: str, *, allow_private: bool = False, allowed: tuple[IPNetwork, ...] = ()
) -> VettedTarget:
    """Refuse non-http(s) URLs and non-public destinations (unless ``allow_private``, or
    the address is in one of the ``allowed`` networks).

    Every resolved address must pass, not just the first: a name answering with one
    public and one private address is refused.
    """
    url, host, port = parse_target(raw_url)
    addresses = await resolve(host, port)
    if not allow_private:
        for ip in addresses:
            problem = address_problem(ip)
            if problem and not any(ip in net for net in allowed):
                raise BlockedDestination(
                    f"destination {host} resolves to {ip} ({problem} address); "
                    "set RINGFLOW_HTTP_ALLOW_PRIVATE=1 to allow private networks"
                )
    return VettedTarget(url=url, host=host, port=port, ips=tuple(addresses))
