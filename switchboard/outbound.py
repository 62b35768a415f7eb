"""The guarded outbound HTTP client: the only way Switchboard dials a provider.

The address policy is enforced where the socket is made, after name resolution, so an IP literal,
an IPv4-mapped / NAT64 / 6to4 spelling of a private address, or a name that resolves (or rebinds)
to one is refused before a single byte leaves. aiohttp skips a custom resolver for IP-literal URLs,
so the check lives in two places that every connection passes: the connector's resolution step
(which gives a clear error) and the ``socket_factory`` (which sees the exact address connected to).

Other rules: https only (http only with ``SWITCHBOARD_OUTBOUND_ALLOW_HTTP``), redirects never
followed, proxies from the environment ignored, connect and total timeouts, a response size cap.

Fairness: one process's pool is shared by every tenant, so no single host and no single owner may
fill it. A host gets at most ``limit_per_host`` connections, an owner scope at most
``limit_per_owner`` dials in flight (``Outbound.slot``, held by the reply pipeline), and the time
spent waiting for either kind of slot is bounded by the short connect budget, not by the total
timeout: a dial that never got a slot ends ``failed``/``connect_failed`` (nothing was sent, so it
is retryable), and only a request that may have been written can end ``unknown``.

Errors are ``OutboundError`` subclasses whose class says whether anything may have been sent:
``OutboundRefused`` and ``OutboundConnectError`` mean nothing was; ``OutboundUncertain`` means the
request may have been written. Messages never carry a URL query, a header or a body.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
import ssl
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from email.utils import parsedate_to_datetime
from typing import Any, Protocol
from urllib.parse import urlsplit

import aiohttp
from aiohappyeyeballs import AddrInfoType
from aiohttp.abc import ResolveResult

from switchboard.addresses import valid_host
from switchboard.db import utcnow
from switchboard.provider import ErrorClass, PostResult, PostState

# Providers annotate with ``outbound.Response``; it is plain data, so it lives with the other values.
from switchboard.provider import Response as Response
from switchboard.settings import Settings

log = logging.getLogger("switchboard.outbound")

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
# RFC 8215's local-use NAT64 prefix: where the IPv4 address sits depends on the site's prefix
# length, so it cannot be unwrapped reliably; it is never a public destination either.
NAT64_LOCAL = ipaddress.IPv6Network("64:ff9b:1::/48")
# Deprecated IPv4-compatible addresses (::a.b.c.d); Python calls ::127.0.0.1 global.
IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")
# IPv4-translated addresses (SIIT, ::ffff:0:a.b.c.d): one more IPv6 spelling of an IPv4 address.
IPV4_TRANSLATED = ipaddress.IPv6Network("::ffff:0:0:0/96")
# Not globally reachable (IANA's special-purpose registries) though Python 3.11 calls them global.
NOT_GLOBAL = [
    ipaddress.ip_network(n) for n in ("192.0.0.0/24", "fec0::/10", "100::/8", "3fff::/20", "5f00::/16")
]
MAX_RESPONSE_BYTES = 1024 * 1024
# Waiting for a pool slot plus making the connection (TCP and TLS): nothing is sent before it ends.
CONNECT_TIMEOUT = 5.0
# From asking for a connection to the last byte of the answer.
TOTAL_TIMEOUT = 15.0
POOL_LIMIT = 100
LIMIT_PER_HOST = 20
LIMIT_PER_OWNER = 8


class OutboundError(Exception):
    """A dial did not produce a response. The message is safe to log (no URL query, no secret)."""


class OutboundRefused(OutboundError):
    """The policy refused the destination (scheme or address); nothing was sent."""


class OutboundConnectError(OutboundError):
    """The connection could not be made; nothing was sent, so a retry is safe."""


class OutboundUncertain(OutboundError):
    """The request may have been written (timeout, reset, oversized answer): never retry it."""


class BlockedAddress(OSError):
    """Raised from the socket factory: the address about to be connected to is not allowed."""


def _forms(ip: IPAddress) -> list[IPAddress]:
    """The address and every IPv4 address it embeds (mapped, NAT64, 6to4)."""
    forms: list[IPAddress] = [ip]
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            forms.append(ip.ipv4_mapped)
        if ip in NAT64 or ip in IPV4_COMPATIBLE or ip in IPV4_TRANSLATED:
            forms.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
        if ip.sixtofour is not None:
            forms.append(ip.sixtofour)
    return forms


def address_allowed(address: str, allow: Iterable[IPNetwork] = ()) -> bool:
    """May a socket connect to ``address``? Globally routable (in every embedded form), or inside
    one of the operator's allowed networks."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    forms = _forms(ip)
    allow = list(allow)
    if ip.version == 6 and ip in NAT64_LOCAL:
        return any(ip in net for net in allow if net.version == 6)
    if any(form in net for form in forms for net in allow if form.version == net.version):
        return True
    return all(_public(form) for form in forms)


def _public(ip: IPAddress) -> bool:
    # is_global alone lets multicast through (224/4 counts as global in Python 3.11).
    if not ip.is_global or ip.is_multicast or ip.is_unspecified:
        return False
    if any(ip in net for net in NOT_GLOBAL if net.version == ip.version):
        return False
    # Reserved IPv6 space, but for the prefixes that embed an IPv4 address (checked as well, in
    # its IPv4 form: a public NAT64 or mapped address is a public destination).
    embeds = isinstance(ip, ipaddress.IPv6Address) and (
        ip.ipv4_mapped is not None or ip in NAT64 or ip in IPV4_COMPATIBLE or ip in IPV4_TRANSLATED
    )
    return not (ip.is_reserved and not embeds)


class _GuardedConnector(aiohttp.TCPConnector):
    def __init__(self, allow: list[IPNetwork], **kwargs: Any) -> None:
        self._allow = allow
        super().__init__(socket_factory=self._socket, **kwargs)

    def _socket(self, addr_info: AddrInfoType) -> socket.socket:
        family, type_, proto, _, sockaddr = addr_info
        if not address_allowed(str(sockaddr[0]), self._allow):
            raise BlockedAddress("destination address is not allowed by the outbound policy")
        return socket.socket(family=family, type=type_, proto=proto)

    async def _resolve_host(self, host: str, port: int, traces: Any = None) -> list[ResolveResult]:
        results = await super()._resolve_host(host, port, traces=traces)
        # One disallowed answer refuses the name: a rebinding name often mixes in a public address.
        if not results or any(not address_allowed(r["host"], self._allow) for r in results):
            raise BlockedAddress("destination address is not allowed by the outbound policy")
        return results


class _Slots:
    """At most ``per_key`` holders per key (an owner scope). Keys with no holder and no waiter are
    forgotten, so the table stays as small as the set of owners dialling right now."""

    def __init__(self, per_key: int) -> None:
        self.per_key = per_key
        self._held: dict[str, int] = {}
        self._waiters: dict[str, list[asyncio.Future[None]]] = {}

    def in_use(self, key: str) -> int:
        return self._held.get(key, 0)

    async def acquire(self, key: str, wait: float) -> None:
        """Take a slot of ``key`` within ``wait`` seconds (first come, first served), or raise
        ``TimeoutError``."""
        if self._held.get(key, 0) < self.per_key and not self._waiters.get(key):
            self._held[key] = self._held.get(key, 0) + 1
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        queue = self._waiters.setdefault(key, [])
        queue.append(future)
        try:
            async with asyncio.timeout(wait):
                await future
        except BaseException:
            if future.done() and not future.cancelled():
                # Handed a slot in the same instant the wait ended: pass it on.
                self.release(key)
            raise
        finally:
            if future in queue:
                queue.remove(future)
            if not queue:
                self._waiters.pop(key, None)

    def release(self, key: str) -> None:
        for future in self._waiters.get(key, ()):
            if not future.done():
                # The slot moves straight to the next waiter; the count of holders is unchanged.
                future.set_result(None)
                return
        held = self._held.get(key, 0) - 1
        if held > 0:
            self._held[key] = held
        else:
            self._held.pop(key, None)


class Outbound:
    """One guarded client per process. Create it inside the running event loop."""

    def __init__(
        self,
        *,
        allow_http: bool = False,
        allow_cidrs: Iterable[IPNetwork] = (),
        ssl_context: ssl.SSLContext | None = None,
        connect_timeout: float = CONNECT_TIMEOUT,
        total_timeout: float = TOTAL_TIMEOUT,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
        pool_limit: int = POOL_LIMIT,
        limit_per_host: int = LIMIT_PER_HOST,
        limit_per_owner: int = LIMIT_PER_OWNER,
    ) -> None:
        self.allow_http = allow_http
        self.allow_cidrs = list(allow_cidrs)
        self.max_response_bytes = max_response_bytes
        self.connect_timeout = connect_timeout
        self.pool_limit = pool_limit
        self.limit_per_host = limit_per_host
        # ``connect`` bounds the wait for a pool slot (the host's, or the whole pool's) together
        # with making the connection, so waiting can never eat the total timeout and turn a dial
        # that sent nothing into an "unknown" one.
        self._timeout = aiohttp.ClientTimeout(
            total=total_timeout, connect=connect_timeout, sock_connect=connect_timeout
        )
        self._ssl: ssl.SSLContext | bool = ssl_context if ssl_context is not None else True
        self._session: aiohttp.ClientSession | None = None
        self._owners = _Slots(limit_per_owner)

    @asynccontextmanager
    async def slot(self, owner: str) -> AsyncIterator[None]:
        """Hold one of ``owner``'s in-flight dial slots for a dial (every request of one attempt).

        Waiting is bounded by the connect budget; past it ``OutboundConnectError`` says nothing was
        sent, so the caller may record ``failed``/``connect_failed`` and retry later. One owner's
        flood therefore queues behind its own slots and never holds more than ``limit_per_owner``
        of the pool that other owners need.
        """
        try:
            await self._owners.acquire(owner, self.connect_timeout)
        except TimeoutError:
            raise OutboundConnectError(
                f"every outbound slot of this owner stayed busy for {self.connect_timeout:g} s"
            ) from None
        try:
            yield
        finally:
            self._owners.release(owner)

    def owner_dials(self, owner: str) -> int:
        """Dials of ``owner`` holding a slot right now (for tests and diagnostics)."""
        return self._owners.in_use(owner)

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = _GuardedConnector(
                self.allow_cidrs,
                ssl=self._ssl,
                limit=self.pool_limit,
                limit_per_host=self.limit_per_host,
                ttl_dns_cache=10,
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                timeout=self._timeout,
                trust_env=False,
                auto_decompress=True,
                headers={"User-Agent": "Switchboard"},
            )
        return self._session

    def check_url(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme == "https" or (parts.scheme == "http" and self.allow_http):
            if not parts.hostname:
                raise OutboundRefused("the URL has no host")
            if parts.username or parts.password:
                raise OutboundRefused("credentials in a URL are not allowed")
            return
        raise OutboundRefused(
            "only https URLs may be dialled"
            if parts.scheme == "http"
            else f"scheme {parts.scheme!r} may not be dialled"
        )

    async def request(
        self,
        method: str,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        json_body: Any = None,
        params: Mapping[str, str] | None = None,
    ) -> Response:
        """Send one request; never follows a redirect (a 3xx comes back as a response)."""
        self.check_url(url)
        host = urlsplit(url).hostname
        try:
            async with self._client().request(
                method,
                url,
                headers=dict(headers or {}),
                json=json_body,
                params=params,
                allow_redirects=False,
            ) as resp:
                # ``read(n)`` answers what has arrived so far, not n bytes: an answer that came in
                # pieces was cut at its first (a comment's id and permalink lost) and the cap never
                # met. Read to the end, or until the answer is over the cap.
                body = bytearray()
                while chunk := await resp.content.read(self.max_response_bytes + 1 - len(body)):
                    body += chunk
                    if len(body) > self.max_response_bytes:
                        raise OutboundUncertain(
                            f"{host} answered with more than {self.max_response_bytes} bytes"
                        )
                return Response(resp.status, dict(resp.headers), bytes(body))
        except OutboundError:
            raise
        except BlockedAddress as exc:
            raise OutboundRefused(f"{host}: {exc}") from None
        except aiohttp.ClientConnectorError as exc:
            if isinstance(exc.os_error, BlockedAddress):
                raise OutboundRefused(f"{host}: {exc.os_error}") from None
            raise OutboundConnectError(f"could not connect to {host}") from None
        except aiohttp.ConnectionTimeoutError:
            raise OutboundConnectError(f"timed out connecting to {host}") from None
        except aiohttp.InvalidURL:
            raise OutboundRefused("the URL is not valid") from None
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise OutboundUncertain(f"{host}: {type(exc).__name__} after the request was sent") from None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def from_settings(settings: Settings, ssl_context: ssl.SSLContext | None = None) -> Outbound:
    return Outbound(
        allow_http=settings.outbound_allow_http,
        allow_cidrs=settings.allow_cidrs,
        ssl_context=ssl_context,
        connect_timeout=settings.outbound_connect_seconds,
        limit_per_host=settings.outbound_limit_per_host,
        limit_per_owner=settings.outbound_limit_per_owner,
    )


class ClientHolder(Protocol):
    """What the functions below need of the service container (``switchboard.services.Services``,
    which imports this module, so it is named here by shape, not imported)."""

    settings: Settings
    outbound: Outbound | None


def client_of(services: ClientHolder) -> Outbound:
    """The process's guarded client (the server sets ``services.outbound`` for its lifetime; built
    lazily here for tests that call the reply pipeline without a server)."""
    if services.outbound is None:
        services.outbound = from_settings(services.settings)
    return services.outbound


async def close_client(services: ClientHolder) -> None:
    """Close the client ``client_of`` made (a test's, a CLI command's or a benchmark's)."""
    client, services.outbound = services.outbound, None
    if client is not None:
        await client.close()


@asynccontextmanager
async def borrowed(services: ClientHolder) -> AsyncIterator[Outbound]:
    """The process's client when the server made one; otherwise (a CLI command) a client for this
    call only, closed after it, so no session is left open at exit."""
    if services.outbound is not None:
        yield services.outbound
        return
    temporary = from_settings(services.settings)
    try:
        yield temporary
    finally:
        await temporary.close()


# ---------------------------------------------------------------------------------------------
# Helpers for provider plugins: turning a provider's answer into a PostResult, never its body.


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """``Retry-After`` as seconds (delta or HTTP date), or None when absent or unreadable."""
    value = next((v for k, v in headers.items() if k.lower() == "retry-after"), None)
    if value is None:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = (parsedate_to_datetime(value) - utcnow()).total_seconds()
        except (TypeError, ValueError, OverflowError):
            # The far side's text: a zone offset, year or day past what a date holds overflows.
            return None
    return max(0.0, min(seconds, 24 * 3600.0))


def header(headers: Mapping[str, str], name: str) -> str | None:
    return next((v for k, v in headers.items() if k.lower() == name.lower()), None)


def class_of_status(status: int) -> ErrorClass:
    if status == 401:
        return "auth"
    if status == 403:
        return "forbidden"
    if status in (404, 410):
        return "not_found"
    if status == 429:
        return "rate_limited"
    if status >= 500:
        return "server"
    return "invalid"


def failure(resp: Response, *, rate_limited: bool = False) -> PostResult:
    """The outcome of a non-success answer. A 429 (or a provider-specific rate limit) is retryable;
    a gateway error may hide a written comment, so it is ``unknown``."""
    if rate_limited or resp.status == 429:
        return PostResult(
            state="failed",
            error_class="rate_limited",
            error_code=f"http_{resp.status}",
            retry_after=retry_after_seconds(resp.headers),
            retryable=True,
        )
    state: PostState = "unknown" if resp.status in (502, 504) else "failed"
    code = "redirect_not_followed" if 300 <= resp.status < 400 else f"http_{resp.status}"
    return PostResult(state=state, error_class=class_of_status(resp.status), error_code=code)


def result_of_error(exc: OutboundError) -> PostResult:
    """The outcome of a dial that got no answer."""
    if isinstance(exc, OutboundRefused):
        return PostResult(state="failed", error_class="network", error_code="address_refused")
    if isinstance(exc, OutboundConnectError):
        return PostResult(state="failed", error_class="network", error_code="connect_failed", retryable=True)
    return PostResult(state="unknown", error_class="network", error_code="no_answer")


# ---------------------------------------------------------------------------------------------
# Account keys: what an owner typed, normalised once at create time (raise ValueError if unusable).


def normalize_host(value: str) -> str:
    """A forge host (``github.com``, ``ghe.example.com:8443``); an https URL is accepted for it."""
    text = value.strip()
    if "://" in text:
        if not text.lower().startswith("https://"):
            raise ValueError("give the host name, or an https:// URL")
        text = text[len("https://") :].rstrip("/")
    host = valid_host(text.lower())
    if host is None:
        raise ValueError(f"{value!r} is not a host name")
    return _without_default_port(host)


def _without_default_port(host: str) -> str:
    # Addresses carry the host as the payload's URL spells it, which omits :443.
    return host.removesuffix(":443")


def normalize_https_base(value: str) -> str:
    """An https base URL (``https://git.example.com`` or ``https://example.com/gitea``), no slash at
    the end, lower-case host, no user info, query or fragment."""
    text = value.strip()
    if not text.lower().startswith("https://"):
        raise ValueError("must be an https:// base URL")
    parts = urlsplit(text)
    if parts.query or parts.fragment or "@" in parts.netloc:
        raise ValueError("must be a plain base URL (no user info, query or fragment)")
    host = valid_host(parts.netloc.lower())
    path = parts.path.rstrip("/")
    segments = path.split("/")[1:]
    if host is None or not all(
        seg not in ("", ".", "..") and all(c.isascii() and (c.isalnum() or c in "._-~") for c in seg)
        for seg in segments
    ):
        raise ValueError(f"{value!r} is not a usable base URL")
    return f"https://{_without_default_port(host)}{path}"


def host_of(base_url: str) -> str:
    """The ``host[:port]`` of a normalised base URL (what an address's host is compared with)."""
    return urlsplit(base_url).netloc.lower()


def json_dict(resp: Response) -> dict[str, Any]:
    """The answer's JSON object, or an empty one."""
    body = resp.json()  # None for a body nested deeper than the parser goes, as for any non-JSON
    return body if isinstance(body, dict) else {}


def int_id(value: Any) -> str | None:
    """A provider's positive integer id as the string echo matching uses, else None."""
    return str(value) if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def https_link(value: Any) -> str | None:
    """A provider's permalink, if it is one printable https URL. It is the far side's text: a NUL
    (PostgreSQL text cannot hold one), a lone surrogate (a JSON ``\\ud800``: no engine can encode
    it) or a line break failed the recording of a post that was made."""
    if not isinstance(value, str) or not value.startswith("https://") or len(value) > 2000:
        return None
    return value if value.isprintable() and " " not in value else None
