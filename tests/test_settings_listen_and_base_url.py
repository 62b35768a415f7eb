"""Where `switchboard serve` listens and the URL it prints are settings like the others: a value
that names no host is refused at start with one line naming the variable, never taken as something
else. An empty SWITCHBOARD_HOST (an env file's `SWITCHBOARD_HOST=`, a script's unset `$HOST`) made
serve listen on every interface of the machine, the operator API, web UI and /metrics with it."""

from __future__ import annotations

import pytest

from switchboard.settings import ConfigError, load_settings
from switchboard.testing import ServeProcesses


@pytest.mark.parametrize("host", ["", " ", "127.0.0.1 "])
async def test_serve_refuses_a_host_that_names_none_in_one_line(
    switchboard_serve: ServeProcesses, host: str
) -> None:
    done = await switchboard_serve.new({"host": host}).run("serve", timeout=20)
    assert done.returncode != 0
    assert "Traceback" not in done.stderr and "serving on" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("error: SWITCHBOARD_HOST: ")


@pytest.mark.parametrize(
    "value",
    [
        "http://",
        "https://",
        "https:///webhooks",
        "https://switchboard.example.com /",
        "https://switch board.example.com",
        "https://switchboard.example.com\n",
        "https://switchboard.example.com/?x=1",
        "https://switchboard.example.com/#top",
    ],
)
def test_a_base_url_that_is_no_url_names_the_variable(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("SWITCHBOARD_BASE_URL", value)
    with pytest.raises(ConfigError, match=r"^SWITCHBOARD_BASE_URL: "):
        load_settings()


@pytest.mark.parametrize(
    ("value", "kept"),
    [
        ("https://switchboard.example.com/", "https://switchboard.example.com"),
        ("http://127.0.0.1:8080", "http://127.0.0.1:8080"),
        ("https://example.com/switchboard/", "https://example.com/switchboard"),
        ("http://[::1]:8080", "http://[::1]:8080"),
    ],
)
def test_a_base_url_is_kept_without_its_trailing_slash(
    monkeypatch: pytest.MonkeyPatch, value: str, kept: str
) -> None:
    monkeypatch.setenv("SWITCHBOARD_BASE_URL", value)
    assert load_settings().base_url == kept


@pytest.mark.parametrize("host", ["127.0.0.1", "::", "::1", "switchboard.internal"])
def test_a_host_is_taken_as_given(monkeypatch: pytest.MonkeyPatch, host: str) -> None:
    monkeypatch.setenv("SWITCHBOARD_HOST", host)
    assert load_settings().host == host
