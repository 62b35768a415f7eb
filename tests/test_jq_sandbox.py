"""switchboard.jq_sandbox with real worker processes: first-match semantics, faults, time and
memory limits, the empty environment, concurrency, and that nothing outlives close()."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from switchboard.jq_sandbox import Match, Sandbox
from switchboard.settings import load_settings

FIXTURES = Path(__file__).parent / "fixtures" / "github"
COMMENT = json.loads((FIXTURES / "issue_comment" / "created.payload.json").read_text())
ENVELOPE = json.dumps(
    {
        "source": "github",
        "event": "issue_comment",
        "verified": True,
        "headers": {"x-github-event": "issue_comment"},
        "payload": COMMENT,
        "actor": {"trusted": True, "sender": COMMENT["sender"]["login"], "matched": "sender"},
        "subject": {"kind": "issue", "key": "octo/repo#1"},
    }
).encode()
PARAMS = json.dumps({"labels": ["agent"], "bot": "@ourbot"}).encode()

# Generous limits, so a busy machine never turns a correct answer into a timeout; the tests of
# the limits make their own sandboxes.
RULE_TIMEOUT = 5.0
BUDGET = 30.0


def worker_pids() -> set[int]:
    """This process's sandbox workers, from /proc: each is started with our pid as its argument."""
    me = str(os.getpid()).encode()
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if len(argv) > 3 and argv[-4].endswith(b"jq_worker.py") and argv[-3] == me:
            found.add(int(entry))
    return found


@pytest.fixture
async def sandbox() -> AsyncIterator[Sandbox]:
    box = Sandbox(workers=2, rule_timeout=RULE_TIMEOUT, budget=BUDGET)
    yield box
    await box.close()


async def first(box: Sandbox, *exprs: str, envelope: bytes = ENVELOPE, params: bytes = PARAMS) -> Match:
    return await box.first_match([(f"r{n}", e) for n, e in enumerate(exprs)], envelope, params)


async def test_the_first_matching_rule_wins(sandbox: Sandbox) -> None:
    assert await first(sandbox, '.event == "issues"', '.event == "issue_comment"', "true") == Match(1, "r1")
    assert await first(sandbox, '.payload.action == "created"') == Match(0, "r0")
    assert await first(sandbox, '.actor.trusted and .subject.kind == "issue"') == Match(0, "r0")
    assert await first(sandbox, '.headers["x-github-event"] == .event') == Match(0, "r0")
    assert await first(sandbox, '$params.labels | index("agent") != null') == Match(0, "r0")
    assert await first(sandbox, ".payload.comment.body | contains($params.bot)") == Match()
    # Rules after the match never run: this loop would otherwise hold the worker until its limit.
    assert await first(sandbox, "true", "def f: f; f") == Match(0, "r0")
    assert (await first(sandbox, "true")).matched
    assert await sandbox.first_match([], ENVELOPE, PARAMS) == Match()


@pytest.mark.parametrize("expr", ["false", "null", "empty", ".payload.missing", "false, true", "null, 1"])
async def test_false_null_and_no_output_are_no_match(sandbox: Sandbox, expr: str) -> None:
    assert await first(sandbox, expr) == Match()


@pytest.mark.parametrize("expr", ["1", '"no"', "{}", "[]", "0", ".payload", "true, false"])
async def test_any_other_first_output_is_a_match(sandbox: Sandbox, expr: str) -> None:
    assert await first(sandbox, expr) == Match(0, "r0")


async def test_a_jq_error_is_a_fault_of_its_rule(sandbox: Sandbox) -> None:
    match = await first(sandbox, "false", ".payload.action + 1", "true")
    assert (match.index, match.rule) == (1, "r1")
    assert match.fault == 'rule r1 failed: jq error: string ("created") and number (1) cannot be added'
    assert not match.matched
    match = await first(sandbox, 'error("rule says no")')
    assert match == Match(0, "r0", "rule r0 failed: jq error: rule says no")
    # An error after the first output is never reached.
    assert await first(sandbox, 'true, error("x")') == Match(0, "r0")


async def test_an_expression_that_does_not_compile_is_a_fault_where_it_stands(sandbox: Sandbox) -> None:
    match = await first(sandbox, "false", ".payload | nosuchfunction", "true")
    assert match == Match(
        1, "r1", "rule r1 does not compile: nosuchfunction/0 is not defined at line 1, column 12"
    )
    # An earlier match still wins: rules run in order, and the broken one is never reached.
    assert await first(sandbox, "true", ".payload | nosuchfunction") == Match(0, "r0")
    # Unbalanced brackets could close the wrapper: refused before any worker sees them.
    match = await first(sandbox, "false", "true)), ((true")
    assert match == Match(1, "r1", "rule r1 is not valid jq: unbalanced ')' at line 1, column 5")
    assert await first(sandbox, "true", "(") == Match(0, "r0")


async def test_an_unreadable_envelope_is_a_fault_before_any_rule(sandbox: Sandbox) -> None:
    match = await first(sandbox, "true", envelope=b'{"payload": ')
    assert (match.index, match.rule) == (None, None)
    assert match.fault is not None and match.fault.startswith("the envelope could not be read")
    match = await first(sandbox, "true", envelope=b'"\xff"')
    assert match == Match(fault="the envelope is not UTF-8")
    assert await first(sandbox, "true") == Match(0, "r0")


async def test_compile_check_reports_each_expression(sandbox: Sandbox) -> None:
    errors = await sandbox.compile_check(
        [
            '.event == "issues"',
            "$params.labels",
            ".payload |",
            "$nope",
            ".payload |\n  bar",
            "(1",
            '.a | test("x")',
            'import "lib" as lib; .',
        ]
    )
    assert errors[0] is None
    assert errors[1] is None  # $params is bound, as when the rules run
    assert errors[2] is not None
    assert errors[2].startswith("syntax error, unexpected ")
    assert errors[2].endswith(" at the end of the expression")
    assert errors[3] == "$nope is not defined at line 1, column 1"
    assert errors[4] == "bar/0 is not defined at line 2, column 3"
    assert errors[5] == "unclosed '('"
    assert errors[6] is None
    assert errors[7] is not None and errors[7].startswith("syntax error")
    assert await sandbox.compile_check([]) == []


async def test_a_rule_that_never_ends_is_stopped_at_its_limit_and_the_pool_answers_on() -> None:
    box = Sandbox(workers=2, rule_timeout=0.5, budget=BUDGET)
    try:
        assert await first(box, "true") == Match(0, "r0")  # started and warm
        for forever in ["def f: f; f", "[repeat(1)]", "last(range(1e12))", "until(false; .)"]:
            started = time.monotonic()
            match = await first(box, "false", forever, "true")
            # The rule's own limit stopped it (the budget is 30 s and says so differently).
            assert match == Match(1, "r1", "rule r1 exceeded its time limit of 500 ms")
            assert time.monotonic() - started < BUDGET
            # The killed worker is replaced; the next delivery is answered as before.
            assert await first(box, "false", "true") == Match(1, "r1")
        assert len(worker_pids()) <= 2
    finally:
        await box.close()


async def test_an_event_loop_busy_past_a_deadline_does_not_fault_a_fast_rule() -> None:
    """A rule that answered in time is judged by when the worker answered, not by when the loop,
    stalled elsewhere (a large payload decoded for another request), read it: without that, load
    on the server would quarantine deliveries that their rules route."""
    box = Sandbox(workers=1, rule_timeout=0.3, budget=BUDGET)
    loop = asyncio.get_running_loop()
    some_work = "([range(60000)] | length) < 0"  # tens of milliseconds, well inside 300 ms
    try:
        assert await first(box, some_work, "true") == Match(1, "r1")  # started and warm
        for _ in range(5):
            # The loop blocks for 1 s just after the rules start, while rule r0 runs.
            loop.call_later(0.01, time.sleep, 1.0)
            assert await first(box, some_work, "true") == Match(1, "r1")
        # A rule that really runs past its limit is still stopped.
        assert await first(box, "def f: f; f") == Match(0, "r0", "rule r0 exceeded its time limit of 300 ms")
    finally:
        await box.close()


async def test_the_budget_bounds_a_delivery_s_rules_together() -> None:
    box = Sandbox(workers=1, rule_timeout=20.0, budget=1.0)
    try:
        match = await first(box, "false", "def f: f; f")
        assert match == Match(1, "r1", "rule r1 was running when the budget of 1000 ms ran out")
    finally:
        await box.close()


async def test_waiting_for_a_worker_counts_against_the_budget() -> None:
    box = Sandbox(workers=1, rule_timeout=1.0, budget=1.0)
    try:
        matches = await asyncio.gather(*(first(box, "def f: f; f") for _ in range(4)))
        assert all(m.fault is not None for m in matches)
        waited = [m for m in matches if m.fault and "no rule sandbox worker came free" in m.fault]
        assert waited, matches
        assert waited[0] == Match(fault="no rule sandbox worker came free within the budget of 1000 ms")
        box.budget = BUDGET
        assert await first(box, "true") == Match(0, "r0")
    finally:
        await box.close()


@pytest.mark.parametrize(
    "bomb",
    [
        ".event * 1e8 | length",
        ".event as $e | [range(1e9) | $e * 10000] | length",
        "reduce range(64) as $i (.event; . + .)",
    ],
)
async def test_a_memory_bomb_is_a_fault_and_its_worker_is_replaced(bomb: str) -> None:
    box = Sandbox(workers=1, rule_timeout=10.0, budget=BUDGET)
    try:
        assert await first(box, "true") == Match(0, "r0")
        (before,) = worker_pids()
        match = await first(box, "false", bomb)
        assert (match.index, match.rule) == (1, "r1")
        # The 256 MiB limit ends it (or, on a slow machine, the rule's 10 s limit does first).
        assert match.fault in (
            "rule r1 stopped the sandbox worker (out of memory?)",
            "rule r1 exceeded its time limit of 10000 ms",
        )
        assert await first(box, "false", "true") == Match(1, "r1")
        assert worker_pids() != {before}
    finally:
        await box.close()


async def test_a_program_that_exhausts_memory_while_compiling_is_refused(sandbox: Sandbox) -> None:
    # jq folds constants when it compiles: this one is built (and runs out of memory) right there.
    bomb = '"x" * 1e9 | length'
    assert await sandbox.compile_check(["true", bomb, ".a"]) == [
        None,
        "compiling it stopped the rule sandbox's worker",
        None,
    ]
    match = await first(sandbox, bomb)
    assert match == Match(fault="the rule sandbox's worker stopped before the rules ran")
    assert await first(sandbox, "true") == Match(0, "r0")


async def test_the_environment_is_unreachable_even_if_the_check_is_bypassed(
    sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The sandbox does not refuse env or $ENV (that is the save-time check's policy): the worker
    # simply has nothing in its environment, whatever the parent's holds.
    monkeypatch.setenv("SWITCHBOARD_TEST_SANDBOX_SECRET", "hunter2-sandbox")
    await sandbox.close()
    box = Sandbox(workers=1, rule_timeout=RULE_TIMEOUT, budget=BUDGET)
    try:
        assert await first(box, "env == {}") == Match(0, "r0")
        assert await first(box, "$ENV == {}") == Match(0, "r0")
        assert await first(box, '[env, $ENV] | tostring | contains("hunter2")') == Match()
        assert await first(box, "env.SWITCHBOARD_TEST_SANDBOX_SECRET != null or env.PATH != null") == Match()
        # Nothing else to read either: no further inputs, no module search path, no file name.
        assert await first(box, "[inputs] == []") == Match(0, "r0")
        assert await first(box, "input_filename == null") == Match(0, "r0")
        assert await first(box, "get_search_list == []") == Match(0, "r0")
        match = await first(box, "input")
        assert match.fault is not None and match.rule == "r0"
        # halt ends the program: a fault, not a silent "no match".
        assert (
            await first(box, "false", "halt")
        ).fault == "rule r1 failed: the rule ended the program early (halt?)"
        # Writing to stderr or the debug stream is harmless: nothing reads it.
        assert await first(box, '"x" | debug | stderr | true') == Match(0, "r0")
    finally:
        await box.close()


async def test_many_tasks_share_the_pool(sandbox: Sandbox) -> None:
    cases = [
        (['.event == "issues"', '.event == "issue_comment"'], Match(1, "r1")),
        (['.payload.action == "created"'], Match(0, "r0")),
        (["false", "null", "empty"], Match()),
        (["false", 'error("no")'], Match(1, "r1", "rule r1 failed: jq error: no")),
        ([f".payload.issue.number == {-n}" for n in range(1, 11)] + ["true"], Match(10, "r10")),
    ]
    jobs = [cases[n % len(cases)] for n in range(60)]
    results = await asyncio.gather(*(first(sandbox, *exprs) for exprs, _ in jobs))
    assert results == [expected for _, expected in jobs]
    assert len(worker_pids()) <= 2


async def test_a_worker_retires_before_its_cpu_limit_without_a_fault() -> None:
    # A 2 s CPU limit: the worker retires after a job once it has used 1 s, and a successor (a
    # second pid) takes over. Had the limit struck mid-rule, that rule would have faulted.
    box = Sandbox(workers=1, rule_timeout=20.0, budget=BUDGET, worker_cpu_seconds=2)
    seen: set[int] = set()
    try:
        for _ in range(40):
            assert await first(box, "[range(300000)] | length > 0") == Match(0, "r0")
            seen |= worker_pids()
            if len(seen) > 1:
                break
        assert len(seen) > 1
    finally:
        await box.close()


async def test_close_leaves_no_process_behind() -> None:
    box = Sandbox(workers=3, rule_timeout=RULE_TIMEOUT, budget=BUDGET)
    await asyncio.gather(*(first(box, "true") for _ in range(6)))
    # One worker stuck in a loop while the sandbox closes.
    stuck = asyncio.create_task(first(box, "def f: f; f"))
    await asyncio.sleep(0.2)
    assert worker_pids()
    await box.close()
    assert worker_pids() == set()
    assert (await stuck).fault is not None
    assert await first(box, "true") == Match(fault="the rule sandbox is closed")
    assert await box.compile_check(["true"]) == ["the rule sandbox is closed"]


async def test_settings_make_the_sandbox() -> None:
    box = Sandbox.from_settings(load_settings(rule_timeout_ms=150, rule_budget_ms=900, rule_workers=3))
    assert (box.workers, box.rule_timeout, box.budget) == (3, 0.15, 0.9)
    await box.close()
    with pytest.raises(ValueError):
        Sandbox(workers=0)
