"""Stand-in provider APIs: real aiohttp servers on 127.0.0.1 (over real TLS by default) that record
every request, so a test can assert the path, the auth header and the body that were sent, and that
nothing arrived when a call was refused.

The bundled kinds answer like the real APIs do: ``github`` (GHES-style ``/api/v3`` and the
api.github.com shape behind ``SWITCHBOARD_GITHUB_API_URL``), ``gitea``, ``slack`` and ``cairn``. Any
other kind answers what the test scripts, or what its ``answer`` callable returns, and 404 otherwise.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from switchboard.testing.tls import tls

# A stand-in's answer: the status and the JSON body. The body is whatever the provider's API
# returns, so its shape is the provider's (Any), as for the payloads in switchboard.provider.
Answer = tuple[int, Any]


@dataclass(frozen=True)
class Recorded:
    """One request as the stand-in received it."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        """The body parsed as JSON (None for an empty body); its shape is the caller's."""
        return json.loads(self.body) if self.body else None

    @property
    def auth(self) -> str | None:
        return self.headers.get("Authorization")


@dataclass
class Scripted:
    """A canned answer for :meth:`FakeProvider.script`. ``body`` is sent as JSON."""

    status: int
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)


class FakeProvider:
    """One stand-in provider on a random 127.0.0.1 port.

    ``kind``: github, gitea, slack or cairn get the real APIs' default answers; for another kind pass
    ``answer`` (called with each request that no script claimed) or script every call.
    ``tls_on=False`` serves plain HTTP (for a `switchboard serve` told ``SWITCHBOARD_OUTBOUND_ALLOW_HTTP``).
    """

    def __init__(
        self, kind: str, *, tls_on: bool = True, answer: Callable[[Recorded], Answer] | None = None
    ) -> None:
        self.kind = kind
        self.tls_on = tls_on
        self.requests: list[Recorded] = []
        self._answer = answer
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
        # The port the kernel chose; aiohttp keeps the listening sockets on the site's server.
        server = site._server
        assert isinstance(server, asyncio.Server)
        self.port = int(server.sockets[0].getsockname()[1])
        return self

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        rec = Recorded(request.method, request.path, dict(request.query), dict(request.headers), body)
        self.requests.append(rec)
        if self.delay:
            await asyncio.sleep(self.delay)
        queued = self._scripts.get((request.method, request.path))
        if queued:
            scripted = queued.pop(0)
            return web.json_response(scripted.body, status=scripted.status, headers=scripted.headers)
        status, payload = self._default(rec)
        if status in (200, 201) and request.method == "POST" and self.on_post is not None:
            await self.on_post(rec, payload)
        return web.json_response(payload, status=status)

    def _default(self, rec: Recorded) -> Answer:
        if self._answer is not None:
            return self._answer(rec)
        builtin: dict[str, Callable[[Recorded], Answer]] = {
            "github": self._github,
            "gitea": self._gitea,
            "slack": self._slack,
            "cairn": self._cairn,
        }
        if self.kind in builtin:
            return builtin[self.kind](rec)
        return 404, {"error": "not_scripted", "method": rec.method, "path": rec.path}

    def _forge_comment(self, rec: Recorded, prefix: str, web_host: str) -> Answer | None:
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

    def _github(self, rec: Recorded) -> Answer:
        for prefix in ("/api/v3", ""):
            answer = self._forge_comment(rec, prefix, "github.com")
            if answer:
                return answer
        return 404, {"message": "Not Found"}

    def _gitea(self, rec: Recorded) -> Answer:
        return self._forge_comment(rec, "/api/v1", self.host) or (404, {"message": "not found"})

    def _slack(self, rec: Recorded) -> Answer:
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

    def _cairn(self, rec: Recorded) -> Answer:
        m = re.fullmatch(r"/v1/artifacts/([^/]+)/comments", rec.path)
        if m and rec.method == "POST":
            comment_id = f"cm_{next(self._ids)}"
            return 201, {"id": comment_id, "url": f"https://cairn.example/a/{m.group(1)}#{comment_id}"}
        if rec.path == "/v1/tokens/self" and rec.method == "GET":
            return 200, {"subject": "switchboard"}
        return 404, {"error": "not_found"}


class FakeProviders:
    """The stand-ins one test started; :meth:`close` stops them all (the ``fake_providers`` fixture)."""

    def __init__(self) -> None:
        self.started: list[FakeProvider] = []

    async def start(
        self, kind: str, *, tls_on: bool = True, answer: Callable[[Recorded], Answer] | None = None
    ) -> FakeProvider:
        provider = await FakeProvider(kind, tls_on=tls_on, answer=answer).start()
        self.started.append(provider)
        return provider

    async def close(self) -> None:
        for provider in self.started:
            await provider.close()
        self.started.clear()


@dataclass
class StalledHost:
    """A host that never answers: a plain TCP server on 127.0.0.1 that accepts every connection,
    reads what is sent and answers nothing, until ``close``. For the outbound client's timeouts and
    fairness: a dial that got a connection here really did write its request (``with_request``)."""

    port: int = 0
    accepted: int = 0
    with_request: int = 0
    open_now: int = 0
    most_open: int = 0
    server: asyncio.Server | None = None
    release: asyncio.Event = field(default_factory=asyncio.Event)

    async def start(self) -> StalledHost:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = int(self.server.sockets[0].getsockname()[1])
        return self

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def close(self) -> None:
        self.release.set()
        if self.server is not None:
            self.server.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        self.open_now += 1
        self.most_open = max(self.most_open, self.open_now)
        got_bytes = False
        try:
            while not self.release.is_set():
                data = await reader.read(65536)
                if not data:
                    break
                if not got_bytes:
                    got_bytes = True
                    self.with_request += 1
        finally:
            self.open_now -= 1
            writer.close()
