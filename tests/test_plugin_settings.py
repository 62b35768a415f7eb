"""A kind's own settings (``SWITCHBOARD_<KIND>_…``): declared by the kind, checked at start-up like
the core's, handed to its ``post`` and ``test``; and a kind's secret-scan rules, which the reply check
adds to the core's."""

from __future__ import annotations

import dataclasses
import random
import string
from typing import Any

import pytest
from fixtures import memo_plugin

from switchboard import connections as conn
from switchboard import hookimpl, plugins, reply, secretscan
from switchboard.errors import SwitchboardError
from switchboard.provider import Address
from switchboard.services import Services, build_services
from switchboard.settings import ConfigError, Settings, load_settings
from switchboard.testing import (
    FakeProvider,
    FakeProviders,
    Scripted,
    ServeProcesses,
    claimed_todo,
    human_and_endpoint,
)

ROOM = Address("memo_room", "memo", "memo acme.ops", {"room": "acme.ops"})


@pytest.fixture
def extra_providers() -> list[object]:
    return [memo_plugin]


@pytest.fixture
async def memo_api(fake_providers: FakeProviders) -> FakeProvider:
    return await fake_providers.start("memo")


@pytest.fixture
def settings_overrides(memo_api: FakeProvider) -> dict[str, Any]:
    # As the operator's SWITCHBOARD_MEMO_API_URL; the trailing slash is the check's to drop.
    return {"memo_api_url": f"{memo_api.base_url}/api/"}


def memo_providers() -> plugins.Providers:
    return plugins.load(entrypoints=False, extra=[memo_plugin], strict=True)


def test_a_kind_reads_its_settings_from_the_environment_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    providers = memo_providers()
    monkeypatch.delenv("SWITCHBOARD_MEMO_API_URL", raising=False)
    assert providers.settings_of("memo", load_settings()) == {
        "SWITCHBOARD_MEMO_API_URL": "https://memo.invalid/api"
    }
    monkeypatch.setenv("SWITCHBOARD_MEMO_API_URL", "https://memo.example.com/v2/")
    monkeypatch.setenv("SWITCHBOARD_MEMO_TOKEN", " t0k ")
    assert providers.settings_of("memo", load_settings()) == {
        "SWITCHBOARD_MEMO_API_URL": "https://memo.example.com/v2",
        "SWITCHBOARD_MEMO_TOKEN": "t0k",
    }
    monkeypatch.setenv("SWITCHBOARD_MEMO_API_URL", "ftp://memo.example.com")
    settings = load_settings()
    with pytest.raises(ConfigError, match=r"^SWITCHBOARD_MEMO_API_URL: must be an http:// or https:// URL$"):
        providers.check_settings(settings)
    # Shown as invalid (never the secret's value) rather than failing the listing.
    (row,) = [r for r in providers.describe(settings) if r["name"] == "fixtures.memo_plugin"]
    (connection,) = [k for k in row["kinds"] if k["role"] == "connection"]
    shown = {s["name"]: s for s in connection["settings"]}
    assert shown["SWITCHBOARD_MEMO_API_URL"]["error"].startswith("SWITCHBOARD_MEMO_API_URL: must be")
    assert shown["SWITCHBOARD_MEMO_TOKEN"] == {
        "name": "SWITCHBOARD_MEMO_TOKEN",
        "description": "A token the operator gives the memo kind.",
        "value": None,
        "from": "environment",
        "secret": True,
        "error": None,
    }


@pytest.mark.parametrize(
    ("name", "value"),
    [("GITHUB_API_URL", "ftp://example.com"), ("SLACK_API_URL", "slack.com/api")],
)
def test_the_bundled_api_urls_keep_their_names_and_stop_start_up(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    monkeypatch.setenv(f"SWITCHBOARD_{name}", value)
    with pytest.raises(ConfigError, match=f"^SWITCHBOARD_{name}: must be an http:// or https:// URL$"):
        build_services(load_settings())


def test_the_bundled_api_urls_default_and_override() -> None:
    providers = plugins.load()
    assert providers.settings_of("github", Settings()) == {
        "SWITCHBOARD_GITHUB_API_URL": "https://api.github.com"
    }
    assert providers.settings_of("slack", Settings(slack_api_url="http://127.0.0.1:9/api/")) == {
        "SWITCHBOARD_SLACK_API_URL": "http://127.0.0.1:9/api"
    }
    # Kinds with no settings have none; an unknown kind has none either.
    assert (
        providers.settings_of("gitea", Settings()) == {} and providers.settings_of("nobody", Settings()) == {}
    )


async def test_serve_refuses_to_start_with_a_bad_kind_setting(switchboard_serve: ServeProcesses) -> None:
    done = await switchboard_serve.new({"github_api_url": "ftp://example.com"}).run("serve", timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        "error: SWITCHBOARD_GITHUB_API_URL: must be an http:// or https:// URL"
    )


async def test_post_gets_its_kinds_settings(
    services: Services, db: Any, guarded: Any, memo_api: FakeProvider
) -> None:
    owner, endpoint = await human_and_endpoint(db)
    await conn.create_connection(
        services, owner, kind="memo", name="memo", account_key="acme", secret="m-tok"
    )
    todo = await claimed_todo(db, endpoint, ROOM)
    memo_api.script("POST", "/api/rooms/acme.ops/messages", Scripted(201, {"id": "m_7"}))
    answer = await reply.send_reply(services, endpoint, todo.id, "On it.")
    assert answer["state"] == "sent", answer
    [request] = memo_api.posts()
    assert request.path == "/api/rooms/acme.ops/messages" and request.auth == "m-tok"


def memo_key() -> str:
    rng = random.Random(11)
    return "memo_key_" + "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(24))


async def test_a_kinds_secret_rule_refuses_a_reply(
    services: Services, db: Any, guarded: Any, memo_api: FakeProvider, caplog: pytest.LogCaptureFixture
) -> None:
    key = memo_key()
    # The core's rules alone do not know the format; with the kind's rules the text is a secret.
    assert secretscan.scan(f"use {key}") is None
    assert secretscan.scan(f"use {key}", services.providers.secret_rules) is memo_plugin.KEY_RULE
    owner, endpoint = await human_and_endpoint(db)
    await conn.create_connection(
        services, owner, kind="memo", name="memo", account_key="acme", secret="m-tok"
    )
    todo = await claimed_todo(db, endpoint, ROOM)
    for text in (f"deploy with {key}", f"deploy with {key[:15]} {key[15:]}"):
        with pytest.raises(SwitchboardError) as err:
            await reply.send_reply(services, endpoint, todo.id, text)
        assert err.value.code == "secret_detected" and err.value.extra == {"rule": "memo-api-key"}
        assert key not in str(err.value.as_dict())
    assert memo_api.posts() == [] and key not in caplog.text


class _LeakyCheckPlugin:
    """The memo kind whose secret setting's check quotes what it refused, as a careless plugin's
    might (``ValueError(f"not a memo token: {value}")``)."""

    @staticmethod
    def check(value: str) -> str:
        raise ValueError(f"not a memo token: {value}")

    @hookimpl
    def register_kinds(self, register: Any) -> None:
        token = dataclasses.replace(memo_plugin.TOKEN, check=self.check)
        register(memo_plugin.SOURCE)
        register(dataclasses.replace(memo_plugin.CONNECTION, settings=(memo_plugin.API_URL, token)))


def test_a_secret_settings_refusal_never_quotes_its_value(monkeypatch: pytest.MonkeyPatch) -> None:
    """A secret never appears in an error: the refusal of a secret setting is shown by
    ``switchboard plugins`` and ends ``serve`` with one line, so the check's message may not carry
    the value it quoted."""
    value = "memo_tok_Zq8rT2vX9kLw"
    monkeypatch.setenv("SWITCHBOARD_MEMO_TOKEN", value)
    providers = plugins.load(entrypoints=False, extra=[_LeakyCheckPlugin()], strict=True)
    with pytest.raises(ConfigError) as refused:
        providers.check_settings(load_settings())
    assert str(refused.value).startswith("SWITCHBOARD_MEMO_TOKEN: ")
    assert value not in str(refused.value) and value[:8] not in str(refused.value)
    described = str(providers.describe(load_settings()))
    assert "SWITCHBOARD_MEMO_TOKEN" in described and value[:8] not in described
