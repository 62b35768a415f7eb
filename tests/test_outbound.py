"""The guarded outbound client: every SSRF form is refused before a byte is sent, redirects are never
followed, environment proxies are ignored, and a huge answer is cut off."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from hypothesis import given
from hypothesis import strategies as st

from switchboard import outbound
from switchboard.outbound import Outbound, OutboundRefused, OutboundUncertain, address_allowed
from switchboard.testing import FakeProvider, guarded_client

LOOPBACK = [ipaddress.ip_network("127.0.0.0/8")]

REFUSED = [
    "127.0.0.1",
    "127.8.9.10",
    "::1",
    "0.0.0.0",  # noqa: S104 (an address under test, not a bind)
    "::",
    "10.1.2.3",
    "172.16.0.1",
    "192.168.1.1",
    "100.64.0.1",
    "169.254.169.254",
    "fe80::1",
    "fe80::1%eth0",
    "fc00::1",
    "224.0.0.1",
    "ff02::1",
    "::ffff:127.0.0.1",
    "::ffff:169.254.169.254",
    "::ffff:10.0.0.1",
    "64:ff9b::7f00:1",
    "64:ff9b::a9fe:a9fe",
    "2002:7f00:1::1",
    "2002:a9fe:a9fe::1",
    "::127.0.0.1",
    "::a9fe:a9fe",
    "64:ff9b:1::7f00:1",
    "64:ff9b:1::808:808",
    "not-an-ip",
]


@pytest.mark.parametrize("address", REFUSED)
def test_non_global_addresses_in_every_spelling_are_refused(address: str) -> None:
    assert not address_allowed(address)


@pytest.mark.parametrize(
    "address", ["8.8.8.8", "2606:4700:4700::1111", "64:ff9b::808:808", "2002:808:808::1"]
)
def test_global_addresses_are_allowed(address: str) -> None:
    assert address_allowed(address)


def test_allowed_networks_admit_their_addresses_and_embedded_forms_only() -> None:
    assert address_allowed("127.0.0.1", LOOPBACK)
    assert address_allowed("::ffff:127.0.0.1", LOOPBACK)
    assert not address_allowed("10.0.0.1", LOOPBACK)
    assert not address_allowed("169.254.169.254", LOOPBACK)


@pytest.fixture
async def fake() -> AsyncIterator[FakeProvider]:
    server = await FakeProvider("github", tls_on=False).start()
    yield server
    await server.close()


@pytest.fixture
async def strict() -> AsyncIterator[Outbound]:
    """The production policy: no allowed networks (http allowed only to reach the plain fake)."""
    client = guarded_client(allow_cidrs="", allow_http=True)
    yield client
    await client.close()


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:{port}/user",
        "http://[::1]:{port}/user",
        "http://localhost:{port}/user",
        "http://[::ffff:127.0.0.1]:{port}/user",
        "http://[64:ff9b::7f00:1]:{port}/user",
        "http://[2002:7f00:1::1]:{port}/user",
        "http://169.254.169.254/latest/meta-data/",
        "http://[::ffff:a9fe:a9fe]/latest/meta-data/",
        "http://10.0.0.1/",
        "http://192.168.0.1:{port}/",
        "http://2130706433:{port}/user",
        "http://0x7f000001:{port}/user",
    ],
)
async def test_private_destinations_are_refused_before_connecting(
    strict: Outbound, fake: FakeProvider, url: str
) -> None:
    with pytest.raises(OutboundRefused):
        await strict.request("GET", url.format(port=fake.port))
    assert fake.requests == []


async def test_the_socket_factory_refuses_even_when_resolution_was_not_checked() -> None:
    """The last line: whatever the resolver said, the socket for a private address is never made."""
    client = guarded_client(allow_cidrs="")
    session = client._client()
    connector = session.connector
    assert isinstance(connector, outbound._GuardedConnector)
    addr = (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", 443))
    with pytest.raises(outbound.BlockedAddress):
        connector._socket(addr)
    sock = connector._socket((socket.AF_INET, socket.SOCK_STREAM, 6, "", ("8.8.8.8", 443)))
    sock.close()
    await client.close()


async def test_only_https_unless_http_is_allowed(fake: FakeProvider) -> None:
    client = guarded_client(allow_cidrs="127.0.0.0/8", allow_http=False)
    try:
        with pytest.raises(OutboundRefused, match="https"):
            await client.request("GET", f"http://127.0.0.1:{fake.port}/user")
        with pytest.raises(OutboundRefused):
            await client.request("GET", f"ftp://127.0.0.1:{fake.port}/user")
        with pytest.raises(OutboundRefused):
            await client.request("GET", f"https://user:pw@127.0.0.1:{fake.port}/user")
    finally:
        await client.close()
    assert fake.requests == []


async def test_allowed_network_reaches_the_fake_over_tls() -> None:
    server = await FakeProvider("github").start()
    client = guarded_client(allow_http=False)
    try:
        resp = await client.request("GET", f"{server.base_url}/api/v3/user", headers={"X-Test": "1"})
        assert resp.status == 200 and resp.json()["login"] == "switchboard-bot"
        assert server.requests[0].headers["X-Test"] == "1"
    finally:
        await client.close()
        await server.close()


async def test_a_redirect_to_a_private_address_is_not_followed() -> None:
    target = await FakeProvider("github", tls_on=False).start()
    redirector = web.Application()

    async def bounce(request: web.Request) -> web.Response:
        raise web.HTTPFound(f"http://127.0.0.1:{target.port}/user")

    redirector.router.add_route("*", "/{tail:.*}", bounce)
    runner = web.AppRunner(redirector)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    client = guarded_client()
    try:
        resp = await client.request("POST", f"http://127.0.0.1:{port}/comments", json_body={"body": "hi"})
        assert resp.status == 302
        assert target.requests == []
        result = outbound.failure(resp)
        assert (result.state, result.error_class, result.error_code) == (
            "failed",
            "invalid",
            "redirect_not_followed",
        )
    finally:
        await client.close()
        await runner.cleanup()
        await target.close()


async def test_environment_proxies_are_ignored(monkeypatch: pytest.MonkeyPatch, fake: FakeProvider) -> None:
    proxy = await FakeProvider("github", tls_on=False).start()
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY"):
        monkeypatch.setenv(name, proxy.base_url)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    client = guarded_client()
    try:
        resp = await client.request("GET", f"{fake.base_url}/user")
        assert resp.status == 200
        assert proxy.requests == [] and len(fake.requests) == 1
    finally:
        await client.close()
        await proxy.close()


async def test_an_oversized_answer_is_cut_off_as_uncertain() -> None:
    app = web.Application()

    async def huge(request: web.Request) -> web.Response:
        return web.Response(body=b"x" * (2 * 1024 * 1024))

    app.router.add_get("/big", huge)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    client = guarded_client(max_response_bytes=64 * 1024)
    try:
        with pytest.raises(OutboundUncertain):
            await client.request("GET", f"http://127.0.0.1:{port}/big")
    finally:
        await client.close()
        await runner.cleanup()


async def test_a_refused_connection_is_a_safe_to_retry_connect_error() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = guarded_client()
    try:
        with pytest.raises(outbound.OutboundConnectError):
            await client.request("POST", f"http://127.0.0.1:{port}/x", json_body={})
    finally:
        await client.close()


async def test_a_timeout_after_sending_is_uncertain(fake: FakeProvider) -> None:
    fake.delay = 2.0
    client = guarded_client(total_timeout=0.5)
    try:
        with pytest.raises(OutboundUncertain):
            await client.request("POST", f"{fake.base_url}/repos/a/b/issues/1/comments", json_body={})
    finally:
        await client.close()
    # The request went out before the client gave up; on a loaded machine the stand-in may record
    # it only after that, so wait for it (a bounded wait: a request never sent still fails).
    for _ in range(100):
        if fake.requests:
            break
        await asyncio.sleep(0.05)
    assert len(fake.requests) == 1


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"Retry-After": "20"}, 20.0),
        ({"retry-after": " 3 "}, 3.0),
        ({}, None),
        ({"Retry-After": "soon"}, None),
    ],
)
def test_retry_after_is_read_as_seconds(headers: dict[str, str], expected: float | None) -> None:
    assert outbound.retry_after_seconds(headers) == expected


def test_account_key_normalisation() -> None:
    assert outbound.normalize_host("GitHub.com") == "github.com"
    assert outbound.normalize_host("https://ghe.example.com:8443/") == "ghe.example.com:8443"
    assert outbound.normalize_https_base("https://Git.Example.com/gitea/") == "https://git.example.com/gitea"
    assert outbound.normalize_https_base("https://git.example.com:443") == "https://git.example.com"
    assert outbound.normalize_host("ghe.example.com:443") == "ghe.example.com"
    for bad in (
        "http://git.example.com",
        "https://u:p@git.example.com",
        "https://git.example.com/?q=1",
        "https://git.example.com/a/../b",
        "https://git.example.com/ü",
        "ftp://x",
    ):
        with pytest.raises(ValueError):
            outbound.normalize_https_base(bad)
    for bad in ("http://github.com", "git hub.com", "github.com/evil"):
        with pytest.raises(ValueError):
            outbound.normalize_host(bad)


@given(st.ip_addresses(v=4))
def test_every_ipv6_spelling_of_an_ipv4_address_gets_its_verdict(v4: ipaddress.IPv4Address) -> None:
    verdict = address_allowed(str(v4))
    n = int(v4)
    spellings = [
        ipaddress.IPv6Address((0xFFFF << 32) | n),  # IPv4-mapped
        ipaddress.IPv6Address(int(ipaddress.IPv6Address("64:ff9b::")) | n),  # NAT64
        ipaddress.IPv6Address((0x2002 << 112) | (n << 80) | 1),  # 6to4
    ]
    if n > 1:  # ::0 and ::1 are the unspecified and loopback addresses themselves
        spellings.append(ipaddress.IPv6Address(n))  # IPv4-compatible
    for v6 in spellings:
        assert address_allowed(str(v6)) == verdict, v6


CHUNK = 16 * 1024


async def _streaming_server(chunks: int) -> tuple[web.AppRunner, int, bytes]:
    """A provider that sends its answer in pieces (chunked encoding, a short pause between pieces),
    as a real provider behind a proxy or a slow link does."""
    app = web.Application()
    payload = b"x" * (chunks * CHUNK)

    async def handler(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        for i in range(chunks):
            await resp.write(payload[i * CHUNK : (i + 1) * CHUNK])
            await asyncio.sleep(0.02)
        await resp.write_eof()
        return resp

    app.router.add_get("/stream", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, port, payload


@pytest.fixture
async def streamed() -> AsyncIterator[tuple[int, bytes]]:
    runner, port, payload = await _streaming_server(chunks=8)  # 128 KiB in 8 pieces
    yield port, payload
    await runner.cleanup()


async def test_an_oversized_answer_sent_in_pieces_is_still_cut_off(streamed: tuple[int, bytes]) -> None:
    """The cap holds however the bytes arrive: a trickled 128 KiB answer is over a 64 KiB cap (the
    client read once, took the first piece, and met no cap)."""
    port, _ = streamed
    client = guarded_client(max_response_bytes=64 * 1024)
    try:
        with pytest.raises(OutboundUncertain):
            resp = await client.request("GET", f"http://127.0.0.1:{port}/stream")
            pytest.fail(f"no error; got a {len(resp.body)}-byte body instead")
    finally:
        await client.close()


async def test_an_answer_under_the_cap_sent_in_pieces_arrives_whole(streamed: tuple[int, bytes]) -> None:
    """A 128 KiB answer, well under the 1 MiB cap, arrives whole (it was cut at its first piece)."""
    port, payload = streamed
    client = guarded_client()
    try:
        resp = await client.request("GET", f"http://127.0.0.1:{port}/stream")
        assert resp.status == 200
        assert len(resp.body) == len(payload)
    finally:
        await client.close()


@pytest.mark.parametrize(
    "address",
    [
        "::ffff:0:7f00:1",  # IPv4-translated (SIIT, ::ffff:0:0:0/96) spelling of 127.0.0.1
        "::ffff:0:a9fe:a9fe",  # IPv4-translated 169.254.169.254 (cloud metadata)
        "::ffff:0:a00:1",  # IPv4-translated 10.0.0.1
        "fec0::1",  # site-local (deprecated, never globally routable)
        "100:0:0:1::1",  # 100::/8 reserved (only 100::/64 is known to Python)
        "5f00::1",  # reserved (IANA: SRv6 SIDs, not globally reachable)
        "192.0.0.8",  # IPv4 dummy address, 192.0.0.0/24 IETF protocol assignments
    ],
)
def test_reserved_and_translated_addresses_are_refused(address: str) -> None:
    assert not address_allowed(address)
