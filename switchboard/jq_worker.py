"""The rule sandbox's worker process: it runs routing rules' jq for ``switchboard.jq_sandbox``.

Started as ``python -I <this file> <parent pid> <CPU seconds>`` with an empty environment; it imports nothing
from Switchboard (the standard library and ``jq`` only), so it starts quickly and works however
Switchboard is installed. The parent enforces every time limit by killing it; this process bounds
its own memory and CPU time, drops the environment and core dumps, and dies with its parent.

Protocol (one job at a time; stdin carries jobs, stdout one JSON object per line):

* ``{"op": "match", "rules": [program, ...], "envelope": N, "params": M}`` followed by N bytes of
  envelope JSON and M bytes of params JSON. Each program is one rule's ``rules.rule_program``. All
  of them run as one jq program over the input ``[envelope, params]``, so the envelope is parsed
  once. Answers: ``{"ready": true}`` once the input is parsed, then per rule in order
  ``{"i": n, "match": false}`` until the first ``{"i": n, "match": true}`` or
  ``{"i": n, "fault": "..."}`` (``"compile": true`` when the fault is jq's compile error). A fault
  before any rule ran is ``{"i": null, "fault": "..."}``.
* ``{"op": "compile", "rules": [program, ...]}``: ``{"i": n, "error": null | "jq's message"}`` each.

The last line of a job carries ``"retire": true`` once this process has used half its CPU limit;
it then exits and the parent starts another, so the limit never lands in the middle of a rule.
"""

from __future__ import annotations

import ctypes
import importlib
import json
import os
import resource
import sys
from collections import OrderedDict
from typing import IO, Any

MEMORY_BYTES = 256 << 20
CPU_SECONDS = 600  # unless the parent says otherwise (argv[2])
MAX_HEADER_BYTES = 4 << 20
MAX_MESSAGE_CHARS = 300
CACHE_PROGRAMS = 64
CACHE_CHARS = 2 << 20
# The input is [envelope, params]; rules see the envelope as `.` and the params as $params. The
# prefix has no newline, so jq's line numbers are the rule programs' own.
PREFIX = ".[1] as $params | .[0] | "


def main(argv: list[str]) -> int:
    parent = int(argv[1]) if len(argv) > 1 and argv[1].isdigit() else None
    cpu_seconds = int(argv[2]) if len(argv) > 2 and argv[2].isdigit() else CPU_SECONDS
    _confine(parent, cpu_seconds)
    jobs, pipe = _private_pipes()
    out = _Out(pipe, retire_at=cpu_seconds / 2)
    # After the limits, so the library's own allocations count too. It ships no type information.
    jq: Any = importlib.import_module("jq")

    cache: OrderedDict[tuple[str, ...], _Compiled] = OrderedDict()
    while True:
        line = jobs.readline(MAX_HEADER_BYTES)
        if not line:
            return 0
        try:
            header = json.loads(line)
            op = header["op"]
            programs = [str(p) for p in header["rules"]]
            sizes = (int(header["envelope"]), int(header["params"])) if op == "match" else (0, 0)
        except (ValueError, KeyError, TypeError):
            out.send({"i": None, "fault": "the sandbox worker received a malformed job"}, final=True)
            return 2
        if op == "compile":
            for n, program in enumerate(programs):
                error = _compile_error(jq, PREFIX + program)
                out.send({"i": n, "error": error}, final=n == len(programs) - 1)
        elif op == "match":
            data = _read_exact(jobs, sum(sizes))
            if data is None:
                return 0
            _match(out, _compiled(jq, cache, tuple(programs)), data, sizes[0], len(programs))
        else:
            out.send({"i": None, "fault": f"the sandbox worker has no operation {op!r}"}, final=True)
            return 2
        if out.retired:
            return 0


class _Compiled:
    """The rules of one job compiled together; ``bad`` is the first rule that does not compile
    (then ``program`` holds the rules before it, if any) and ``message`` jq's complaint."""

    def __init__(self, program: Any, size: int, bad: int | None = None, message: str = "") -> None:
        self.program = program
        self.size = size
        self.bad = bad
        self.message = message


def _compiled(
    jq: Any, cache: OrderedDict[tuple[str, ...], _Compiled], programs: tuple[str, ...]
) -> _Compiled:
    hit = cache.get(programs)
    if hit is not None:
        cache.move_to_end(programs)
        return hit
    size = sum(map(len, programs))
    try:
        entry = _Compiled(jq.compile(_together(programs)), size)
    except Exception as exc:
        # Find the first rule that fails alone: the rules before it still run, in order.
        errors = (_compile_error(jq, PREFIX + p) for p in programs)
        bad, error = next(((n, e) for n, e in enumerate(errors) if e is not None), (None, None))
        if bad is None or error is None:
            entry = _Compiled(None, size, 0, _short(str(exc)))
        else:
            before = jq.compile(_together(programs[:bad])) if bad else None
            entry = _Compiled(before, size, bad, error)
    cache[programs] = entry
    while len(cache) > CACHE_PROGRAMS or sum(e.size for e in cache.values()) > CACHE_CHARS:
        cache.popitem(last=False)
        if not cache:
            break
    return entry


def _together(programs: tuple[str, ...]) -> str:
    # The leading null is the "ready" marker: jq yields it once the whole input is parsed, so the
    # parent's per-rule clock starts after the parse (which only the budget bounds).
    return PREFIX + "(null" + "".join(f",\n({p})" for p in programs) + ")"


def _match(out: _Out, compiled: _Compiled, data: bytes, envelope_end: int, count: int) -> None:
    """Run one job: ``data`` is the envelope's JSON, then the params' from ``envelope_end``."""
    view = memoryview(data)
    try:
        text = b"".join((b"[", view[:envelope_end], b",", view[envelope_end:], b"]")).decode()
    except UnicodeDecodeError:
        out.send({"i": None, "fault": "the envelope is not UTF-8"}, final=True)
        return
    ran = count if compiled.bad is None else compiled.bad
    results = None
    if compiled.program is not None:
        results = iter(compiled.program.input_text(text))
        try:
            marker = next(results)
        except StopIteration:
            marker = False
        except MemoryError:
            raise
        except Exception as exc:
            out.send({"i": None, "fault": f"the envelope could not be read: {_short(str(exc))}"}, final=True)
            return
        if marker is not None:
            out.send({"i": None, "fault": "the rules' program did not start as expected"}, final=True)
            return
    out.send({"ready": True}, final=False)
    for n in range(ran):
        assert results is not None
        try:
            value = next(results)
        except StopIteration:
            out.send({"i": n, "fault": "the rule ended the program early (halt?)"}, final=True)
            return
        except MemoryError:
            raise
        except Exception as exc:
            out.send({"i": n, "fault": f"jq error: {_short(str(exc))}"}, final=True)
            return
        if value is True:
            out.send({"i": n, "match": True}, final=True)
            return
        if value is not False:
            out.send({"i": n, "fault": "the rule did not yield a boolean"}, final=True)
            return
        out.send({"i": n, "match": False}, final=compiled.bad is None and n == count - 1)
    if compiled.bad is not None:
        out.send({"i": compiled.bad, "fault": compiled.message, "compile": True}, final=True)


def _compile_error(jq: Any, program: str) -> str | None:
    try:
        jq.compile(program)
    except MemoryError:
        raise
    except Exception as exc:
        return _short(str(exc), 2000)
    return None


class _Out:
    """The result pipe. The last line of a job says whether this process retires, decided once,
    so the parent never sends a job to a worker that is about to exit."""

    def __init__(self, pipe: IO[bytes], retire_at: float) -> None:
        self.pipe = pipe
        self.retire_at = retire_at
        self.retired = False

    def send(self, message: dict[str, Any], *, final: bool) -> None:
        if final and _cpu_used() >= self.retire_at:
            message["retire"] = self.retired = True
        self.pipe.write(json.dumps(message, separators=(",", ":")).encode() + b"\n")
        self.pipe.flush()


def _short(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _cpu_used() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _read_exact(stream: IO[bytes], size: int) -> bytes | None:
    data = stream.read(size)
    return data if len(data) == size else None


def _confine(parent: int | None, cpu_seconds: int) -> None:
    """Bound memory and CPU, no core files (they would hold payloads), no environment (Python put
    LC_CTYPE back while starting), and die with the parent."""
    for limit, value in (
        (resource.RLIMIT_AS, MEMORY_BYTES),
        (resource.RLIMIT_CPU, cpu_seconds),
        (resource.RLIMIT_CORE, 0),
    ):
        _, hard = resource.getrlimit(limit)
        capped = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(limit, (capped, capped))
    os.environ.clear()
    if sys.platform == "linux":
        pr_set_pdeathsig, sigkill = 1, 9
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, sigkill)
    if parent is not None and os.getppid() != parent:
        # The parent died before the death signal was armed.
        raise SystemExit(0)


def _private_pipes() -> tuple[IO[bytes], IO[bytes]]:
    """The job and result pipes on private descriptors; 0 and 1 become /dev/null, so nothing jq or
    the C library might read or print can touch the protocol."""
    jobs = os.fdopen(os.dup(0), "rb", buffering=1 << 16)
    out = os.fdopen(os.dup(1), "wb")
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    return jobs, out


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except (MemoryError, BrokenPipeError, KeyboardInterrupt):
        # The parent reads the closed pipe as "the worker stopped"; there is nothing to add.
        os._exit(3)
