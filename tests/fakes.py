"""Stand-in provider servers: real aiohttp apps on 127.0.0.1, over real TLS, that answer like GitHub
(GHES-style ``/api/v3`` and the api.github.com shape behind ``SWITCHBOARD_GITHUB_API_URL``), Gitea,
Slack and Cairn, and record every request so tests can assert path, auth header and body, and that
nothing arrived when a call was refused.

Also the few helpers reply tests share: a test CA, a guarded client that trusts it, and a claimed
todo with a reply address.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import ipaddress
import itertools
import json
import re
import ssl
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from switchboard.db import utcnow
from switchboard.models import Endpoint, Todo
from switchboard.outbound import Outbound
from switchboard.provider import Address
from switchboard.tenancy import Owner, add_human, vend_endpoint
from switchboard.todos import new_todo_row

# ---------------------------------------------------------------------------------------------
# TLS: one CA per test run, a server certificate for 127.0.0.1 / ::1 / localhost.


@dataclass(frozen=True)
class TestTLS:
    server: ssl.SSLContext
    client: ssl.SSLContext


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def make_tls() -> TestTLS:
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("switchboard test CA"))
        .issuer_name(_name("switchboard test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("127.0.0.1"))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [
                    x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                    x509.IPAddress(ipaddress.ip_address("::1")),
                    x509.DNSName("localhost"),
                ]
            ),
            critical=False,
        )
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    folder = Path(tempfile.mkdtemp(prefix="sbtls"))
    (folder / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (folder / "key.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(folder / "cert.pem", folder / "key.pem")
    client = ssl.create_default_context(cadata=ca.public_bytes(serialization.Encoding.PEM).decode())
    return TestTLS(server=server, client=client)


_TLS: TestTLS | None = None


def tls() -> TestTLS:
    global _TLS
    if _TLS is None:
        _TLS = make_tls()
    return _TLS


def guarded_client(allow_cidrs: str = "127.0.0.0/8", allow_http: bool = True, **kwargs: Any) -> Outbound:
    """The production client, trusting the test CA (the fakes speak real TLS)."""
    nets = [ipaddress.ip_network(c.strip()) for c in allow_cidrs.split(",") if c.strip()]
    return Outbound(allow_http=allow_http, allow_cidrs=nets, ssl_context=tls().client, **kwargs)


# ---------------------------------------------------------------------------------------------
# The stand-in providers.


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body) if self.body else None

    @property
    def auth(self) -> str | None:
        return self.headers.get("Authorization")


@dataclass
class Scripted:
    status: int
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)


class FakeProvider:
    """One provider on a random 127.0.0.1 port. ``kind``: github, gitea, slack or cairn."""

    def __init__(self, kind: str, *, tls_on: bool = True) -> None:
        self.kind = kind
        self.tls_on = tls_on
        self.requests: list[Recorded] = []
        self._scripts: dict[tuple[str, str], list[Scripted]] = {}
        self._ids = itertools.count(1001)
        self._ts = itertools.count(1)
        # Seconds to hold every answer (lets concurrent calls overlap).
        self.delay = 0.0
        # Awaited after a comment/message is recorded and before the answer: the provider firing its
        # webhook before our POST returns.
        self.on_post: Callable[[Recorded, dict[str, Any]], Awaitable[None]] | None = None
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"{'https' if self.tls_on else 'http'}://127.0.0.1:{self.port}"

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def script(self, method: str, path: str, *responses: Scripted) -> None:
        """Answer the next calls of ``method path`` with these, in order, then the default again."""
        self._scripts.setdefault((method, path), []).extend(responses)

    def posts(self) -> list[Recorded]:
        return [r for r in self.requests if r.method == "POST"]

    async def start(self) -> FakeProvider:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=tls().server if self.tls_on else None)
        await site.start()
        server = site._server
        assert server is not None
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        rec = Recorded(request.method, request.path, dict(request.query), dict(request.headers), body)
        self.requests.append(rec)
        if self.delay:
            await asyncio.sleep(self.delay)
        queued = self._scripts.get((request.method, request.path))
        if queued:
            answer = queued.pop(0)
            return web.json_response(answer.body, status=answer.status, headers=answer.headers)
        status, payload = self._default(rec)
        if status in (200, 201) and request.method == "POST" and self.on_post is not None:
            await self.on_post(rec, payload)
        return web.json_response(payload, status=status)

    def _default(self, rec: Recorded) -> tuple[int, Any]:
        handler = getattr(self, f"_{self.kind}")
        return handler(rec)

    def _forge_comment(self, rec: Recorded, prefix: str, web_host: str) -> tuple[int, Any] | None:
        m = re.fullmatch(prefix + r"/repos/([^/]+)/([^/]+)/issues/(\d+)/comments", rec.path)
        if m and rec.method == "POST":
            comment_id = next(self._ids)
            owner, repo, number = m.groups()
            return 201, {
                "id": comment_id,
                "html_url": f"https://{web_host}/{owner}/{repo}/issues/{number}#issuecomment-{comment_id}",
                "body": (rec.json or {}).get("body"),
            }
        if rec.path == prefix + "/user" and rec.method == "GET":
            return 200, {"login": "switchboard-bot", "id": 99}
        return None

    def _github(self, rec: Recorded) -> tuple[int, Any]:
        for prefix in ("/api/v3", ""):
            answer = self._forge_comment(rec, prefix, "github.com")
            if answer:
                return answer
        return 404, {"message": "Not Found"}

    def _gitea(self, rec: Recorded) -> tuple[int, Any]:
        return self._forge_comment(rec, "/api/v1", self.host) or (404, {"message": "not found"})

    def _slack(self, rec: Recorded) -> tuple[int, Any]:
        if rec.path == "/api/chat.postMessage" and rec.method == "POST":
            sent = rec.json or {}
            ts = f"1726990{next(self._ts):03d}.000100"
            return 200, {"ok": True, "channel": sent.get("channel"), "ts": ts, "message": {"text": "…"}}
        if rec.path == "/api/chat.getPermalink":
            channel, ts = rec.query.get("channel", ""), rec.query.get("message_ts", "")
            return 200, {"ok": True, "permalink": f"https://acme.slack.com/archives/{channel}/p{ts}"}
        if rec.path == "/api/auth.test" and rec.method == "POST":
            return 200, {"ok": True, "team_id": "T0TEST", "user_id": "U0BOT", "bot_id": "B0BOT"}
        return 404, {"ok": False, "error": "unknown_method"}

    def _cairn(self, rec: Recorded) -> tuple[int, Any]:
        m = re.fullmatch(r"/v1/artifacts/([^/]+)/comments", rec.path)
        if m and rec.method == "POST":
            comment_id = f"cm_{next(self._ids)}"
            return 201, {"id": comment_id, "url": f"https://cairn.example/a/{m.group(1)}#{comment_id}"}
        if rec.path == "/v1/tokens/self" and rec.method == "GET":
            return 200, {"subject": "switchboard"}
        return 404, {"error": "not_found"}


# ---------------------------------------------------------------------------------------------
# World helpers: a human, an endpoint allowed to reply, a claimed todo with a reply address.


async def human_and_endpoint(db: Any, handle: str = "alice") -> tuple[Owner, Endpoint]:
    human, _ = await add_human(db, handle)
    owner = Owner(human_id=human.id)
    endpoint, _ = await vend_endpoint(db, name=f"{handle}-agent", owner=owner, families=["reply"])
    return owner, endpoint


def forge_address(kind: str, host: str, repo: str = "acme/api", number: int = 7) -> Address:
    return Address(
        kind="forge_comment",
        provider=kind,
        display=f"{kind} {host}/{repo}#{number}",
        fields={"host": host, "repo": repo, "number": number},
    )


def slack_address(team: str = "T0TEST", channel: str = "C0456", thread: str = "1726990000.000100") -> Address:
    return Address(
        kind="slack_thread",
        provider="slack",
        display=f"slack {team}/{channel} thread {thread}",
        fields={"team_id": team, "channel": channel, "thread_ts": thread},
    )


def cairn_address(instance: str, artifact_id: str = "art_42") -> Address:
    host = instance.partition("://")[2]
    return Address(
        kind="cairn_comment",
        provider="cairn",
        display=f"cairn {host} artifact {artifact_id}",
        fields={"instance": instance, "artifact_id": artifact_id},
    )


async def claimed_todo(
    db: Any, endpoint: Endpoint, address: Address | None, *, state: str = "claimed", **values: Any
) -> Todo:
    """A todo of ``endpoint`` in ``state`` (claimed with a live lease by default)."""
    now = utcnow()
    todo = new_todo_row(
        endpoint_id=endpoint.id,
        queue=endpoint.queues[0],
        source=address.provider if address else "generic",
        kind="test",
        title="a test todo",
        payload={"hello": "world"},
        reply_to=address.as_dict() if address else None,
    )
    todo.state = state
    if state == "claimed":
        todo.attempt = 1
        todo.lease_expires_at = now + dt.timedelta(seconds=300)
    for key, value in values.items():
        setattr(todo, key, value)
    async with db.write() as s:
        s.add(todo)
    return todo


# ---------------------------------------------------------------------------------------------
# Fixtures (import them into a test module: ``from tests.fakes import fake_github, ...``).


@pytest.fixture
async def fake_github() -> AsyncIterator[FakeProvider]:
    server = await FakeProvider("github").start()
    yield server
    await server.close()


@pytest.fixture
async def fake_gitea() -> AsyncIterator[FakeProvider]:
    server = await FakeProvider("gitea").start()
    yield server
    await server.close()


@pytest.fixture
async def fake_slack() -> AsyncIterator[FakeProvider]:
    server = await FakeProvider("slack").start()
    yield server
    await server.close()


@pytest.fixture
async def fake_cairn() -> AsyncIterator[FakeProvider]:
    server = await FakeProvider("cairn").start()
    yield server
    await server.close()


@pytest.fixture
def settings_overrides(fake_github: FakeProvider, fake_slack: FakeProvider) -> dict[str, Any]:
    """The SaaS API bases point at the fakes (SWITCHBOARD_GITHUB_API_URL / _SLACK_API_URL)."""
    return {"github_api_url": fake_github.base_url, "slack_api_url": f"{fake_slack.base_url}/api"}


@pytest.fixture
async def guarded(services: Any) -> AsyncIterator[Outbound]:
    """The services' outbound client: the production one, trusting the fakes' test CA."""
    client = guarded_client(allow_cidrs=services.settings.outbound_allow_cidrs)
    services.outbound = client
    yield client
    await client.close()
