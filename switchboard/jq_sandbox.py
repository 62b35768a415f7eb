"""Routing rules run here: a small pool of worker processes (``switchboard.jq_worker``) that the
event loop never waits on for longer than the time limits.

A worker runs with an empty environment, bounded memory and CPU, and its standard streams cut off
from the protocol. Every time limit is the parent's: each rule has ``rule_timeout`` seconds from
the moment the previous one answered, and a delivery's rules together (waiting for a free worker
included) have ``budget``; an answer counts when the worker has sent it by then, even if this
event loop, busy elsewhere, reads it later (``_receive_by``). A worker that misses a deadline is
killed (SIGKILL) and replaced; one that dies (its memory limit, a crash) is replaced too. A rule's
problem is never an exception here: it is a ``Match`` with a ``fault``, which the caller fails
closed on (docs/routing.md).

Logs name rules by id and never carry payload text or jq's messages (which can quote the payload).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import sys
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from switchboard.jq_text import EXPR_FIRST_LINE, expression_problem, rule_program

if TYPE_CHECKING:
    from switchboard.settings import Settings

log = logging.getLogger(__name__)

WORKER = Path(__file__).with_name("jq_worker.py")
# How long compiling one expression may take in compile_check (whatever the rule timeout).
COMPILE_SECONDS = 2.0
# Result lines are short; a longer one means the worker is not speaking the protocol.
MAX_LINE_BYTES = 1 << 16


@dataclass(frozen=True)
class Match:
    """What a delivery's rules decided: the first matching rule (``index``, ``rule``), no match
    (all None), or a ``fault`` (with the rule at fault, when one was running)."""

    index: int | None = None
    rule: str | None = None
    fault: str | None = None

    @property
    def matched(self) -> bool:
        return self.index is not None and self.fault is None


class _Gone(Exception):
    """The worker stopped answering in protocol (it exited, or wrote something unreadable)."""


class _Worker:
    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        assert proc.stdin is not None and proc.stdout is not None
        self.stdin = proc.stdin
        self.stdout = proc.stdout

    async def send(self, *chunks: bytes) -> None:
        try:
            self.stdin.writelines(chunks)
            await self.stdin.drain()
        except (ConnectionError, RuntimeError) as exc:
            raise _Gone from exc

    async def receive(self) -> dict[str, Any]:
        try:
            line = await self.stdout.readline()
        except (ValueError, ConnectionError) as exc:  # ValueError: a line over the reader's limit
            raise _Gone from exc
        if not line.endswith(b"\n"):
            raise _Gone
        try:
            message = json.loads(line)
        except ValueError:
            raise _Gone from None
        if not isinstance(message, dict):
            raise _Gone
        return message


# After a deadline passes, how many turns of the event loop an answer gets to be read (see
# _receive_by): enough for a line already in the pipe to be selected, read and handed over.
LATE_LOOKS = 4


async def _receive_by(worker: _Worker, deadline: float) -> dict[str, Any]:
    """The worker's next message if it has sent it by ``deadline``, else TimeoutError.

    Judged by what the worker did, not by when this event loop got round to reading it: the wait
    does not cancel the read, and once the deadline passes the read gets a few more turns of the
    loop, so an answer already in the pipe still counts. Without that, a loop busy elsewhere past a
    deadline (a large payload decoded for another request, a burst under load) would turn a fast
    rule into a fault, and quarantine a delivery that its rules would have routed.
    """
    loop = asyncio.get_running_loop()
    receiving = asyncio.ensure_future(worker.receive())
    try:
        await asyncio.wait({receiving}, timeout=max(0.0, deadline - loop.time()))
        for _ in range(LATE_LOOKS):
            if receiving.done():
                break
            await asyncio.sleep(0)
        if not receiving.done():
            raise TimeoutError
        return receiving.result()
    finally:
        if not receiving.done():
            receiving.cancel()
            with contextlib.suppress(asyncio.CancelledError, _Gone):
                await receiving


class Sandbox:
    """The pool. Create it anywhere; workers start when first needed. Their pipes belong to the
    event loop that started them: use one sandbox on one loop, and close it there."""

    def __init__(
        self,
        workers: int = 2,
        rule_timeout: float = 0.2,
        budget: float = 1.0,
        *,
        worker_cpu_seconds: int = 600,
    ) -> None:
        """``worker_cpu_seconds``: the CPU limit of each worker process (a backstop behind the
        parent's clocks); a worker retires at half of it, between jobs."""
        if workers < 1 or rule_timeout <= 0 or budget <= 0 or worker_cpu_seconds < 2:
            raise ValueError("a sandbox needs a worker, positive time limits and 2 s of worker CPU")
        self.workers = workers
        self.rule_timeout = rule_timeout
        self.budget = budget
        self.worker_cpu_seconds = worker_cpu_seconds
        # Free slots: a running worker, or None for one to start. A busy worker is in no queue.
        # The most recently used worker first: it has the rules compiled already.
        self._idle: asyncio.LifoQueue[_Worker | None] | None = None
        self._procs: set[asyncio.subprocess.Process] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False
        # Per tenant (an owner scope): its deliveries holding or waiting for a worker, bounded by a
        # share of the pool (``share``), and how many calls use the entry (it goes at 0).
        self._shares: dict[str, tuple[asyncio.Semaphore, list[int]]] = {}

    @property
    def share(self) -> int:
        """How many workers one tenant's deliveries may hold or wait for at once: all but one, so
        that one tenant's burst of slow rules leaves a worker to everyone else's deliveries (whose
        budget would otherwise run out in the queue behind it: quarantined as rule faults)."""
        return max(1, self.workers - 1)

    @classmethod
    def from_settings(cls, settings: Settings) -> Sandbox:
        return cls(
            workers=settings.rule_workers,
            rule_timeout=settings.rule_timeout_ms / 1000,
            budget=settings.rule_budget_ms / 1000,
        )

    async def first_match(
        self, rules: Sequence[tuple[str, str]], envelope: bytes, params: bytes, *, tenant: str | None = None
    ) -> Match:
        """The first of ``rules`` ((id, jq expression), in order) whose expression's first output
        on ``envelope`` (JSON) is neither false nor null, with ``$params`` bound to ``params``
        (a JSON object). No output is no match; a jq error, a timeout or a dead worker is a fault.
        ``tenant`` (the webhook's owner scope) takes at most ``share`` of the workers at once."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.budget
        if not rules:
            return Match()
        # An expression the wrapper cannot hold (see rules.rule_program) is a fault where it
        # stands; the rules before it still run, first match first.
        count, bad = len(rules), None
        for n, (rule_id, expr) in enumerate(rules):
            problem = expression_problem(expr) if isinstance(expr, str) else "expr is not a string"
            if problem is not None:
                count, bad = n, Match(n, rule_id, f"rule {rule_id} is not valid jq: {problem}")
                break
        if count == 0:
            return bad or Match()
        header = _match_header(tuple(expr for _, expr in rules[:count]), len(envelope), len(params))
        ids = [rule_id for rule_id, _ in rules]
        async with self._tenant_share(tenant, deadline) as refused:
            if refused is not None:
                return refused
            worker = await self._acquire(deadline)
            if isinstance(worker, Match):
                return worker
            healthy = False
            try:
                match, healthy = await self._match(worker, (header, envelope, params), ids, count, deadline)
            finally:
                self._release(worker, healthy)
        if match is None:
            return bad or Match()
        return match

    async def compile_check(self, exprs: Sequence[str]) -> list[str | None]:
        """jq's complaint about each expression (one line, its line numbers the expression's own),
        or None where it compiles. ``$params`` is defined, as when the rules run."""
        results: list[str | None] = [None] * len(exprs)
        pending: list[int] = []
        for n, expr in enumerate(exprs):
            problem = expression_problem(expr) if isinstance(expr, str) else "expr is not a string"
            if problem is None:
                pending.append(n)
            else:
                results[n] = problem
        loop = asyncio.get_running_loop()
        while pending:
            worker = await self._acquire(loop.time() + COMPILE_SECONDS + self.budget)
            if isinstance(worker, Match):
                for n in pending:
                    results[n] = worker.fault
                break
            header = {"op": "compile", "rules": [rule_program(exprs[n]) for n in pending]}
            done, healthy, completed = 0, False, False
            try:
                async with asyncio.timeout(COMPILE_SECONDS) as scope:
                    await worker.send(json.dumps(header).encode() + b"\n")
                    while done < len(pending):
                        message = await worker.receive()
                        error = message.get("error")
                        if message.get("i") != done or not (error is None or isinstance(error, str)):
                            raise _Gone
                        expr = exprs[pending[done]]
                        results[pending[done]] = None if error is None else _compile_message(error, expr)
                        done += 1
                        scope.reschedule(loop.time() + COMPILE_SECONDS)
                        healthy = message.get("retire") is not True
                        if not healthy and done < len(pending):
                            raise _Gone
                pending, completed = [], True
            except TimeoutError:
                results[pending[done]] = f"did not compile within {COMPILE_SECONDS:g} s"
                pending = pending[done + 1 :]
            except _Gone:
                results[pending[done]] = "compiling it stopped the rule sandbox's worker"
                pending = pending[done + 1 :]
            finally:
                self._release(worker, completed and healthy)
        return results

    async def close(self) -> None:
        """Kill every worker and wait for them; later calls answer with a fault."""
        self._closed = True
        for task in list(self._tasks):
            task.cancel()
        for proc in list(self._procs):
            _kill(proc)
        await asyncio.gather(*self._tasks, *(p.wait() for p in self._procs), return_exceptions=True)
        self._procs.clear()

    # --- one job -----------------------------------------------------------------------------

    async def _match(
        self,
        worker: _Worker,
        job: tuple[bytes, bytes, bytes],
        ids: list[str],
        count: int,
        deadline: float,
    ) -> tuple[Match | None, bool]:
        """(the decision, or None when none of the ``count`` rules matched; whether the worker
        may serve again)."""
        loop = asyncio.get_running_loop()
        running: int | None = None  # the rule the worker is on; None before the first
        rule_deadline = deadline
        try:
            async with asyncio.timeout_at(deadline):
                await worker.send(*job)
            message = await _receive_by(worker, deadline)
            if isinstance(message.get("fault"), str) and message.get("i") is None:
                # The input could not be read: no rule ran.
                return Match(fault=message["fault"]), message.get("retire") is not True
            if message.get("ready") is not True:
                raise _Gone
            running = 0
            while True:
                rule_deadline = loop.time() + self.rule_timeout
                message = await _receive_by(worker, min(rule_deadline, deadline))
                n = message.get("i")
                retire = message.get("retire") is True
                fault = message.get("fault")
                if isinstance(fault, str):
                    return self._fault(message, n, ids, fault), not retire
                if n != running or not isinstance(message.get("match"), bool):
                    raise _Gone
                if message["match"]:
                    return Match(n, ids[n]), not retire
                running += 1
                if running == count:
                    return None, not retire
                if retire:
                    raise _Gone
        except TimeoutError:
            if running is None:
                fault = f"the rules did not start within the budget of {_ms(self.budget)}"
                log.warning("rule sandbox: killed a worker that did not start the rules within the budget")
                return Match(fault=fault), False
            rule = ids[running]
            if rule_deadline <= deadline:
                fault = f"rule {rule} exceeded its time limit of {_ms(self.rule_timeout)}"
            else:
                fault = f"rule {rule} was running when the budget of {_ms(self.budget)} ran out"
            log.warning("rule sandbox: killed a worker running rule %r past its time limit", rule)
            return Match(running, rule, fault), False
        except _Gone:
            if running is None:
                return Match(fault="the rule sandbox's worker stopped before the rules ran"), False
            rule = ids[running]
            log.warning("rule sandbox: a worker stopped during rule %r (memory limit or crash)", rule)
            return Match(running, rule, f"rule {rule} stopped the sandbox worker (out of memory?)"), False

    @staticmethod
    def _fault(message: dict[str, Any], n: object, ids: list[str], fault: str) -> Match:
        if not isinstance(n, int) or not 0 <= n < len(ids):
            return Match(fault=f"the rules could not run: {fault}")
        rule = ids[n]
        if message.get("compile") is True:
            return Match(n, rule, f"rule {rule} does not compile: {_compile_message(fault, None)}")
        return Match(n, rule, f"rule {rule} failed: {fault}")

    # --- the pool ----------------------------------------------------------------------------

    def _slots(self) -> asyncio.LifoQueue[_Worker | None]:
        if self._idle is None:
            self._idle = asyncio.LifoQueue()
            for _ in range(self.workers):
                self._idle.put_nowait(None)
        return self._idle

    @contextlib.asynccontextmanager
    async def _tenant_share(self, tenant: str | None, deadline: float) -> AsyncIterator[Match | None]:
        """A place in ``tenant``'s share of the pool (see ``share``) for one delivery's rules, or
        the fault that says none came free within its budget (None: no tenant, no share)."""
        if tenant is None:
            yield None
            return
        gate, users = self._shares.setdefault(tenant, (asyncio.Semaphore(self.share), [0]))
        users[0] += 1
        held = False
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout_at(deadline):
                    await gate.acquire()
                held = True
            budget = f"no rule sandbox worker came free within the budget of {_ms(self.budget)}"
            yield None if held else Match(fault=budget)
        finally:
            if held:
                gate.release()
            users[0] -= 1
            if not users[0]:
                self._shares.pop(tenant, None)

    async def _acquire(self, deadline: float) -> _Worker | Match:
        """A worker for one job, started if need be, or the fault that says why there is none."""
        if self._closed:
            return Match(fault="the rule sandbox is closed")
        slots = self._slots()
        try:
            async with asyncio.timeout_at(deadline):
                slot = await slots.get()
        except TimeoutError:
            return Match(fault=f"no rule sandbox worker came free within the budget of {_ms(self.budget)}")
        if slot is not None and slot.proc.returncode is None:
            return slot
        if slot is not None:
            self._procs.discard(slot.proc)
        try:
            return await self._start()
        except (OSError, ValueError, RuntimeError):
            log.exception("rule sandbox: could not start a worker")
            slots.put_nowait(None)
            return Match(fault="the rule sandbox could not start a worker")
        except BaseException:
            slots.put_nowait(None)
            raise

    def _release(self, worker: _Worker, healthy: bool) -> None:
        if self._closed:
            _kill(worker.proc)
            return
        if healthy:
            self._slots().put_nowait(worker)
            return
        _kill(worker.proc)
        task = asyncio.get_running_loop().create_task(self._replace(worker.proc))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _replace(self, dead: asyncio.subprocess.Process) -> None:
        """Reap a killed worker and start its successor, so the next job does not wait for it."""
        slot: _Worker | None = None
        try:
            await dead.wait()
            self._procs.discard(dead)
            if not self._closed:
                slot = await self._start()
        except (OSError, ValueError, RuntimeError):
            log.exception("rule sandbox: could not start a worker")
        finally:
            if not self._closed:
                self._slots().put_nowait(slot)

    async def _start(self) -> _Worker:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-I",
            str(WORKER),
            str(os.getpid()),
            str(self.worker_cpu_seconds),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            env={},
            cwd="/",
            limit=MAX_LINE_BYTES,
        )
        self._procs.add(proc)
        return _Worker(proc)


def _kill(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()


@lru_cache(maxsize=256)
def _match_header_rules(exprs: tuple[str, ...]) -> bytes:
    return json.dumps([rule_program(e) for e in exprs]).encode()


def _match_header(exprs: tuple[str, ...], envelope: int, params: int) -> bytes:
    # The rules' part is the same for every delivery to a webhook, so it is encoded once.
    rules = _match_header_rules(exprs)
    return b'{"op":"match","envelope":%d,"params":%d,"rules":%s}\n' % (envelope, params, rules)


_LOCATION = re.compile(r" at <top-level>, line (\d+), column (\d+):?$")


def _compile_message(raw: str, expr: str | None) -> str:
    """jq's first complaint, on one line, with its position in the expression rather than in the
    program around it."""
    lines = raw.splitlines() or [""]
    first = next((line for line in lines if line.startswith("jq: error: ")), lines[0])
    first = first.removeprefix("jq: error: ")
    m = _LOCATION.search(first)
    if m is None:
        return first.rstrip(":")
    line = int(m.group(1)) - EXPR_FIRST_LINE + 1
    expr_lines = None if expr is None else expr.count("\n") + 1
    if line < 1 or (expr_lines is not None and line > expr_lines):
        where = " at the end of the expression"
    else:
        where = f" at line {line}, column {m.group(2)}"
    return first[: m.start()] + where


def _ms(seconds: float) -> str:
    return f"{round(seconds * 1000)} ms"
