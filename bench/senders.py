"""Senders of signed GitHub deliveries: real octokit payloads (``tests/fixtures/github``, verbatim)
signed the way GitHub signs them, sent by N concurrent closed-loop senders.

Two drivers, one result shape:

* ``python``: N asyncio tasks on one aiohttp session, each sending its next delivery as soon as the
  last one is answered. Exact accounting (a sender stops at the deadline only between requests).
* ``wrk``: the C load generator (Debian package ``wrk``) with ``bench/wrk_signed.lua``, N
  connections on one thread. GitHub signs only the body, so each delivery's own body
  (``distinct``) is signed beforehand in Python and the script sends the next one with a fresh
  delivery id. A run ends at the count or the time bound with up to N requests in flight, which
  the server may store although nobody reads the answer (``unread_in_flight`` in the stored check).

Both collect the todo ids of every 202, so the caller can check each acknowledged todo is stored.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import itertools
import json
import shutil
import signal
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from bench.common import FIXTURES, Latencies

GITHUB_EVENTS: tuple[tuple[str, str], ...] = (
    ("issues", "issues/opened.payload.json"),
    ("issue_comment", "issue_comment/created.payload.json"),
    ("pull_request", "pull_request/opened.payload.json"),
    ("pull_request_review", "pull_request_review/submitted.payload.json"),
)
WRK_SCRIPT = Path(__file__).resolve().parent / "wrk_signed.lua"
DRIVERS = ("python", "wrk")


def github_bodies(count: int | None = None) -> list[tuple[str, bytes]]:
    """``(event, raw body)`` pairs from ``tests/fixtures/github`` (verbatim, never edited); with
    ``count``, that many distinct deliveries made from them (:func:`distinct`)."""
    verbatim = [(event, (FIXTURES / "github" / name).read_bytes()) for event, name in GITHUB_EVENTS]
    if count is None:
        return verbatim
    return [distinct(*verbatim[n % len(verbatim)]) for n in range(count)]


# Numbers the distinct bodies of this process, so no two calls hand out the same body.
_SEQUENCE = itertools.count(1)


def distinct(event: str, body: bytes) -> tuple[str, bytes]:
    """The fixture body as another delivery of the same event: one extra top-level field,
    ``"bench_delivery": N`` (unique in this process), in front of the payload's own fields.

    Every new delivery needs a body of its own: a forge signs only the body, so Switchboard keys a
    verified delivery by its body's hash too (a replayed body under a fresh delivery id is the
    duplicate of the first), and the same four bodies would measure the duplicate path. Real
    deliveries of one event differ in ids and timestamps; an unknown field is ignored by ingest."""
    assert body.startswith(b"{"), "a GitHub payload is a JSON object"
    return event, b'{"bench_delivery": %d, ' % next(_SEQUENCE) + body[1:]


def signature_of(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def github_headers(
    secret: str, event: str, body: bytes, *, delivery: str | None = None, signature: str | None = None
) -> dict[str, str]:
    """GitHub's headers for one delivery (a fresh delivery id unless one is given)."""
    return {
        "Content-Type": "application/json",
        "User-Agent": "GitHub-Hookshot/bench",
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
        "X-GitHub-Hook-ID": "1",
        "X-Hub-Signature-256": signature or signature_of(secret, body),
    }


@dataclass(frozen=True)
class Signed:
    event: str
    body: bytes
    signature: str


def signed_bodies(secret: str, count: int | None = None) -> list[Signed]:
    """The fixture bodies (with ``count``: that many distinct deliveries), each signed with ``secret``."""
    return [Signed(event, body, signature_of(secret, body)) for event, body in github_bodies(count)]


def wrk_available() -> bool:
    return shutil.which("wrk") is not None


def _result(
    statuses: dict[int, int], wall: float, latencies: dict[str, Any], created: int, todo_ids: list[str]
) -> dict[str, Any]:
    acked = statuses.get(202, 0)
    return {
        "in_flight_at_stop": 0,
        "sent": sum(statuses.values()),
        "acked": acked,
        "refused": sum(n for s, n in statuses.items() if s != 202),
        # Anything but 202 by status (-1: no answer), so a refusal is never silent.
        "other_statuses": {str(s): n for s, n in sorted(statuses.items()) if s != 202} or None,
        "todos_created": created,
        "todo_ids": todo_ids,
        "seconds": round(wall, 2),
        "per_second": round(acked / wall, 1) if wall > 0 else 0.0,
        **latencies,
    }


async def python_blast(
    http: aiohttp.ClientSession, url: str, bodies: list[Signed], *, senders: int, total: int, seconds: float
) -> dict[str, Any]:
    """``total`` deliveries from ``senders`` concurrent senders, stopping early at ``seconds``."""
    tickets = itertools.count()
    latencies = Latencies()
    statuses: dict[int, int] = {}
    todo_ids: list[str] = []
    created = 0
    deadline = time.monotonic() + seconds

    async def sender() -> None:
        nonlocal created
        while time.monotonic() < deadline:
            ticket = next(tickets)
            if ticket >= total:
                return
            signed = bodies[ticket % len(bodies)]
            headers = github_headers("", signed.event, signed.body, signature=signed.signature)
            started = time.perf_counter()
            try:
                async with http.post(url, data=signed.body, headers=headers) as response:
                    answer = await response.json(content_type=None)
                    status = response.status
            except (aiohttp.ClientError, ValueError):
                status, answer = -1, {}
            elapsed = time.perf_counter() - started
            statuses[status] = statuses.get(status, 0) + 1
            if status == 202:
                latencies.add(elapsed)
                created += int(answer.get("created", 0))
                todo_ids.extend(t["id"] for t in answer.get("todos", []) if t.get("created"))

    started = time.perf_counter()
    await asyncio.gather(*(sender() for _ in range(senders)))
    wall = time.perf_counter() - started
    return _result(statuses, wall, latencies.summary(), created, todo_ids)


async def wrk_blast(
    url: str, bodies: list[Signed], *, senders: int, total: int, seconds: float, threads: int = 1
) -> dict[str, Any]:
    """The same load from ``wrk``: ``senders`` connections, ``total`` answers at most (split over
    the threads), ``seconds`` at most. Latency percentiles are wrk's, over every answer."""
    threads = max(1, min(threads, senders))
    with tempfile.TemporaryDirectory(prefix="sbbench-wrk-") as tmp:
        directory = Path(tmp)
        lines = []
        for n, signed in enumerate(bodies):
            path = directory / f"body-{n}.json"
            path.write_bytes(signed.body)
            lines.append(f"{signed.event}\t{signed.signature}\t{path}")
        manifest = directory / "manifest.tsv"
        manifest.write_text("\n".join(lines) + "\n")
        ids_file = directory / "ids.txt"
        done_dir = directory / "done"
        done_dir.mkdir()
        per_thread = -(-total // threads)
        process = await asyncio.create_subprocess_exec(
            "wrk",
            "-t",
            str(threads),
            "-c",
            str(senders),
            "-d",
            f"{max(1, round(seconds))}s",
            "--timeout",
            "30s",
            "-s",
            str(WRK_SCRIPT),
            url,
            "--",
            str(manifest),
            str(per_thread),
            uuid.uuid4().hex[:8],
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={"WRK_IDS_FILE": str(ids_file), "WRK_DONE_DIR": str(done_dir), "PATH": "/usr/bin:/bin"},
        )
        talking = asyncio.create_task(process.communicate())
        # wrk waits out -d even when every thread has reached the count bound; each thread leaves
        # a file when it has, and SIGINT then ends wrk early (it still reports as usual).
        while not talking.done():
            if len(list(done_dir.iterdir())) >= threads and process.returncode is None:
                process.send_signal(signal.SIGINT)
                break
            await asyncio.sleep(0.05)
        out, err = await asyncio.wait_for(talking, seconds + 60)
        text = out.decode(errors="replace")
        line = next((ln for ln in text.splitlines() if ln.startswith("WRKJSON ")), None)
        if process.returncode != 0 or line is None:
            raise RuntimeError(f"wrk failed ({process.returncode}): {err.decode(errors='replace')[-500:]}")
        figures = json.loads(line.removeprefix("WRKJSON "))
        todo_ids = ids_file.read_text().split() if ids_file.is_file() else []
    statuses = {int(s): n for s, n in figures["statuses"].items()}
    errors = figures["errors"]
    # Socket errors and timeouts got no answer at all: -1, as the Python senders count them.
    unanswered = errors["connect"] + errors["read"] + errors["write"] + errors["timeout"]
    if unanswered:
        statuses[-1] = unanswered
    latencies: dict[str, Any] = {
        "n": figures["requests"],
        "p50_ms": round(figures["p50_us"] / 1000, 3),
        "p99_ms": round(figures["p99_us"] / 1000, 3),
        "mean_ms": round(figures["mean_us"] / 1000, 3),
        "max_ms": round(figures["max_us"] / 1000, 3),
    }
    # The threads' own clocks (first request to last answer): wrk's duration is always -d.
    wall = float(figures["elapsed_s"]) or figures["duration_us"] / 1e6
    result = _result(statuses, wall, latencies, int(figures["created"]), todo_ids)
    # Sent but not answered when the run stopped: the server may have stored these.
    result["in_flight_at_stop"] = max(0, int(figures["sent"]) - int(figures["answered"]))
    return result


async def blast(
    driver: str,
    http: aiohttp.ClientSession,
    url: str,
    bodies: list[Signed],
    *,
    senders: int,
    total: int,
    seconds: float,
) -> dict[str, Any]:
    if driver == "wrk":
        return await wrk_blast(url, bodies, senders=senders, total=total, seconds=seconds)
    return await python_blast(http, url, bodies, senders=senders, total=total, seconds=seconds)


async def spread_blast(
    driver: str,
    http: aiohttp.ClientSession,
    urls: list[str],
    bodies: list[Signed],
    *,
    senders: int,
    total: int,
    seconds: float,
) -> dict[str, Any]:
    """The same load spread evenly over several servers of one database, as a load balancer in
    front of them would: each URL gets its share of the senders, of the count and of the bodies
    (every delivery still distinct), all at once. Counts add up; the wall time is the longest
    share's; p50, p99 and max are the worst share's (its own percentiles; wrk keeps no samples to
    pool), the mean is weighted by answers. Fewer senders than servers use as many servers as
    there are senders (a sender is one connection)."""
    urls = urls[: max(1, min(len(urls), senders))]
    if len(urls) == 1:
        return await blast(driver, http, urls[0], bodies, senders=senders, total=total, seconds=seconds)
    k = len(urls)
    parts = await asyncio.gather(
        *(
            blast(
                driver,
                http,
                url,
                bodies[i::k],
                senders=senders // k + (1 if i < senders % k else 0),
                total=total // k + (1 if i < total % k else 0),
                seconds=seconds,
            )
            for i, url in enumerate(urls)
        )
    )
    statuses: dict[int, int] = {}
    for part in parts:
        statuses[202] = statuses.get(202, 0) + part["acked"]
        for status, n in (part["other_statuses"] or {}).items():
            statuses[int(status)] = statuses.get(int(status), 0) + n
    answered = sum(int(part.get("n") or 0) for part in parts)
    latencies = {
        "n": answered,
        **{key: max(part.get(key) or 0.0 for part in parts) for key in ("p50_ms", "p99_ms", "max_ms")},
        "mean_ms": round(
            sum((part.get("mean_ms") or 0.0) * int(part.get("n") or 0) for part in parts) / answered, 3
        )
        if answered
        else None,
    }
    wall = max(part["seconds"] for part in parts)
    result = _result(
        statuses,
        wall,
        latencies,
        sum(part["todos_created"] for part in parts),
        [todo for part in parts for todo in part["todo_ids"]],
    )
    result["in_flight_at_stop"] = sum(part["in_flight_at_stop"] for part in parts)
    return result
