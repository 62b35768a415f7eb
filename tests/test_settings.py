from __future__ import annotations

import pytest

from switchboard.settings import ConfigError, load_settings


def test_defaults_match_the_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("DATABASE_URL", "PORT", "HOST", "BASE_URL", "SECRET_ENCRYPTION_KEY"):
        monkeypatch.delenv(f"SWITCHBOARD_{name}", raising=False)
    s = load_settings()
    assert s.database_url == "sqlite+aiosqlite:///./switchboard.db"
    assert (s.host, s.port, s.base_url) == ("127.0.0.1", 8080, "http://127.0.0.1:8080")
    assert (s.reply_grace_seconds, s.reply_todo_cap) == (900, 20)
    assert s.encryption_key is None and not s.outbound_allow_http


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("PORT", "eighty"),
        ("PORT", "70000"),
        ("DATABASE_URL", "mysql://x"),
        ("SECRET_ENCRYPTION_KEY", "not base64!"),
        ("SECRET_ENCRYPTION_KEY", "c2hvcnQ="),
        ("OUTBOUND_ALLOW_CIDRS", "10.0.0.0/8,bogus"),
        ("OUTBOUND_ALLOW_HTTP", "perhaps"),
        ("REPLY_GRACE_SECONDS", "-1"),
        ("REPLY_TODO_CAP", "0"),
        ("LOG_LEVEL", "LOUD"),
    ],
)
def test_a_bad_value_names_the_variable(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
    monkeypatch.setenv(f"SWITCHBOARD_{name}", value)
    with pytest.raises(ConfigError, match=f"^SWITCHBOARD_{name}: "):
        load_settings()


def test_a_bad_key_never_echoes_the_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWITCHBOARD_SECRET_ENCRYPTION_KEY", "c3VwZXJzZWNyZXQ=")
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert "c3VwZXJzZWNyZXQ" not in str(info.value)


def test_plain_postgresql_urls_use_asyncpg(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWITCHBOARD_DATABASE_URL", "postgresql://u@h/db")
    monkeypatch.setenv("SWITCHBOARD_OUTBOUND_ALLOW_CIDRS", "10.1.0.0/16, fd00::/8")
    s = load_settings()
    assert s.database_url == "postgresql+asyncpg://u@h/db"
    assert [str(n) for n in s.allow_cidrs] == ["10.1.0.0/16", "fd00::/8"]
