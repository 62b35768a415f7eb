"""``bench/profile.py`` reads py-spy's samples into the shares bench/README.md quotes ("Where the
time goes"): a step's share is the samples with its function anywhere on the stack, a renamed
function is caught here rather than read as 0%, and a missing sampler or a bad argument is one
clear line, not a traceback."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from fixtures.bench_kit import run_bench

from bench import profile
from bench.profile import STEPS, Profile, checked_steps, frame_pattern

# py-spy's raw format: one stack a line (thread first, outermost frame next), then its count.
LOOP = "thread (1): MainThread;run (asyncio/base_events.py:600);"
HANDLER = "handle_webhook (switchboard/ingest.py:525);"
WRITER = "thread (2): Thread-4 (_connection_worker_thread);_connection_worker_thread (aiosqlite/core.py:60);"
RAW = [
    LOOP + HANDLER + "verify (switchboard/ingest_steps.py:118);json_object (switchboard/provider.py:400) 6",
    LOOP.replace(":600", ":601") + HANDLER.replace(":525", ":5") + "intake (switchboard/ingest_steps.py:9) 3",
    LOOP + "IngestWriter._commit (switchboard/ingest_writer.py:274) 1",
    WRITER + "drive (switchboard/direct.py:190) 4",
    "not a sample line",
]


def test_every_step_names_a_function_that_exists() -> None:
    assert checked_steps() == []


def test_a_steps_share_is_the_samples_with_its_function_on_the_stack() -> None:
    read = Profile.read(RAW)
    assert read.threads == {
        "thread (1): MainThread": 10,
        "thread (2): Thread-4 (_connection_worker_thread)": 4,
    }
    assert read.total("MainThread") == 10
    share = {label.strip(): read.share("MainThread", frame_pattern(m, q)) for label, m, q in STEPS}
    assert share["the handler"] == pytest.approx(0.9)
    assert share["verify (the provider's)"] == pytest.approx(0.6)
    assert share["the body's JSON"] == pytest.approx(0.6)
    assert share["intake (trust, rules, the todo rows)"] == pytest.approx(0.3)
    assert share["the group-commit writer"] == pytest.approx(0.1)
    assert share["the shared echo read"] == 0.0
    # Another thread's samples never count towards the event loop's.
    assert read.share("_connection_worker_thread", frame_pattern("switchboard.direct", "drive")) == 1.0


def test_functions_add_up_whatever_line_ran() -> None:
    inclusive, own = Profile.read(RAW).functions("MainThread")
    shares = dict(inclusive)
    # ``run`` sampled at two lines is one function, on every stack of the thread.
    assert shares["run (asyncio/base_events.py)"] == 1.0
    assert shares["handle_webhook (switchboard/ingest.py)"] == pytest.approx(0.9)
    assert own[0] == ("json_object (switchboard/provider.py)", pytest.approx(0.6))
    assert Profile().functions("MainThread") == ([], [])


def test_a_missing_sampler_is_one_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(RuntimeError, match=r"py-spy is not installed: .*bench/requirements.txt"):
        profile.py_spy()


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--seconds", "0"], "--seconds must be positive"),
        (["--senders", "-3"], "--senders must be positive"),
        (["--warmup", "-1"], "--warmup must not be negative"),
        (["--db", "oracle"], "invalid choice"),
    ],
)
def test_a_bad_argument_is_a_usage_error(argv: list[str], said: str) -> None:
    done = run_bench("profile", *argv, timeout=60)
    assert done.returncode == 2
    assert said in done.stderr and "Traceback" not in done.stderr


def test_what_no_step_covers_is_listed_by_the_function_running() -> None:
    raw = [*RAW, LOOP + "Task.__step (asyncio/tasks.py:260);Metrics.inc (switchboard/metrics.py:42) 2"]
    read = Profile.read(raw)
    top_level = [frame_pattern(m, q) for label, m, q in STEPS if not label.startswith(" ")]
    # 12 samples of the event loop: 10 under the handler or the writer, 2 under neither.
    assert read.outside("MainThread", top_level) == [
        ("Metrics.inc (switchboard/metrics.py)", pytest.approx(2 / 12))
    ]
    assert Profile().outside("MainThread", top_level) == []


def test_native_frames_take_the_own_time_and_leave_the_steps_as_they_were() -> None:
    # ``--native``: py-spy puts the C frames (asyncpg's Cython, libc) under the Python frame that
    # called them, some with a line and some with only their library.
    native = "Connection._do_execute (asyncpg/connection.py:2035);protocol_array_encode (protocol.c:28988)"
    commit = "IngestWriter._commit (switchboard/ingest_writer.py:274);"
    raw = [*RAW, LOOP + commit + native + ";send (libc.so.6) 5"]
    read = Profile.read(raw)
    writer = next(frame_pattern(m, q) for label, m, q in STEPS if label.strip() == "the group-commit writer")
    assert read.share("MainThread", writer) == pytest.approx(6 / 15)
    inclusive, own = read.functions("MainThread")
    assert own[0] == ("json_object (switchboard/provider.py)", pytest.approx(6 / 15))
    assert ("send (libc.so.6)", pytest.approx(5 / 15)) in own
    assert ("protocol_array_encode (protocol.c)", pytest.approx(5 / 15)) in inclusive


def test_native_and_nonblocking_reach_the_sampler() -> None:
    plain = profile.sampler_argv("py-spy", 42, 8.0, 200, Path("raw.txt"), False, False)
    assert plain[:3] == ["py-spy", "record", "-p"] and "42" in plain and "--threads" in plain
    assert "--native" not in plain and "--nonblocking" not in plain
    both = profile.sampler_argv("py-spy", 42, 0.2, 200, Path("raw.txt"), True, True)
    assert both[-2:] == ["--nonblocking", "--native"]
    # py-spy takes whole seconds, at least one.
    assert both[both.index("-d") + 1] == "1"
