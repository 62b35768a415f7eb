"""Connections: sealed, write-only, unique per scope, normalised per kind, scoped, tested."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import pytest
from sqlalchemy import select, text

from switchboard import connections as conn
from switchboard.errors import SwitchboardError
from switchboard.models import Base, Connection
from switchboard.provider import CheckResult, ConnectionCheck
from switchboard.tenancy import Owner, add_human, add_team, set_member, vend_endpoint
from switchboard.testing import FakeProvider, Scripted, guarded_client
from switchboard.vault import Vault, binding

SECRET = "gh-test-secret-" + "Zq8Xv2Lm9Np4"  # not a token shape: the scanner is not under test here


@pytest.fixture
def settings_overrides(fake_api_settings: dict[str, Any]) -> dict[str, Any]:
    """The GitHub and Slack API bases point at the stand-ins."""
    return fake_api_settings


async def owner_of(db: Any, handle: str) -> Owner:
    human, _ = await add_human(db, handle)
    return Owner(human_id=human.id)


async def test_create_seals_the_secret_and_never_returns_it(services: Any, db: Any) -> None:
    alice = await owner_of(db, "alice")
    view = await conn.create_connection(
        services, alice, kind="github", name="gh", account_key=None, secret=SECRET, targets=["acme/*"]
    )
    assert view["account_key"] == "github.com" and view["kind"] == "github"
    assert view["fingerprint"].startswith("fp_") and SECRET not in repr(view)
    assert view["targets"] == ["acme/*"] and view["owner"] == "human:alice"
    async with db.read() as s:
        row = await s.get(Connection, view["id"])
    assert SECRET.encode() not in row.secret_ciphertext
    assert (
        services.vault.open(
            row.secret_ciphertext, row.secret_key_id, binding("connections", "secret", row.id)
        )
        == SECRET
    )
    # The ciphertext is bound to its row: moved to another id it does not open.
    with pytest.raises(Exception, match="failed authentication"):
        services.vault.open(
            row.secret_ciphertext, row.secret_key_id, binding("connections", "secret", "cn_x")
        )


async def test_without_an_encryption_key_create_and_rotate_are_refused(services: Any, db: Any) -> None:
    alice = await owner_of(db, "alice")
    made = await conn.create_connection(
        services, alice, kind="slack", name="s", account_key="T0TEST", secret=SECRET
    )
    keyless = dataclasses.replace(services, vault=Vault(None))
    with pytest.raises(SwitchboardError) as err:
        await conn.create_connection(
            keyless, alice, kind="slack", name="s2", account_key="T0X", secret=SECRET
        )
    assert err.value.code == "encryption_required" and err.value.http_status == 409
    with pytest.raises(SwitchboardError) as err:
        await conn.rotate_connection(keyless, alice, made["id"], SECRET + "2")
    assert err.value.code == "encryption_required"
    assert len(await conn.list_connections(services, alice)) == 1


@pytest.mark.parametrize(
    ("kind", "typed", "stored"),
    [
        ("github", "GitHub.com", "github.com"),
        ("github", "https://GHE.example.com/", "ghe.example.com"),
        ("gitea", "https://Git.Example.com/", "https://git.example.com"),
        ("slack", "t0abc123", "T0ABC123"),
        ("cairn", "https://cairn.example.com/", "https://cairn.example.com"),
    ],
)
async def test_account_keys_are_normalised_per_kind(
    services: Any, db: Any, kind: str, typed: str, stored: str
) -> None:
    alice = await owner_of(db, "alice")
    view = await conn.create_connection(
        services, alice, kind=kind, name="c", account_key=typed, secret=SECRET
    )
    assert view["account_key"] == stored


@pytest.mark.parametrize(
    ("kind", "typed"),
    [
        ("gitea", "http://git.example.com"),
        ("gitea", None),
        ("slack", "not a team"),
        ("cairn", "cairn.example.com"),
        ("github", "https://u:p@evil.example"),
    ],
)
async def test_unusable_account_keys_are_invalid(
    services: Any, db: Any, kind: str, typed: str | None
) -> None:
    alice = await owner_of(db, "alice")
    with pytest.raises(SwitchboardError) as err:
        await conn.create_connection(services, alice, kind=kind, name="c", account_key=typed, secret=SECRET)
    assert err.value.code == "invalid_argument"


@pytest.mark.parametrize(
    "bad",
    [
        {"kind": "no_such_kind"},
        {"name": ""},
        {"name": "two\nlines"},
        {"secret": ""},
        {"secret": "has space"},
        {"targets": "acme/*"},
        {"targets": ["acme/<script>"]},
        {"config": ["not", "an", "object"]},
    ],
)
async def test_bad_input_is_invalid_argument(services: Any, db: Any, bad: dict[str, Any]) -> None:
    alice = await owner_of(db, "alice")
    args = {"kind": "github", "name": "gh", "account_key": None, "secret": SECRET, **bad}
    with pytest.raises(SwitchboardError) as err:
        await conn.create_connection(services, alice, **args)
    assert err.value.code == "invalid_argument"
    assert await conn.list_connections(services, alice) == []


async def test_name_and_account_are_unique_per_scope(services: Any, db: Any) -> None:
    alice, bob = await owner_of(db, "alice"), await owner_of(db, "bob")
    await conn.create_connection(services, alice, kind="github", name="gh", account_key=None, secret=SECRET)
    with pytest.raises(SwitchboardError) as err:
        await conn.create_connection(
            services, alice, kind="slack", name="gh", account_key="T01", secret=SECRET
        )
    assert err.value.code == "conflict" and "named" in err.value.message
    with pytest.raises(SwitchboardError) as err:
        await conn.create_connection(
            services, alice, kind="github", name="other", account_key="GITHUB.COM", secret=SECRET
        )
    assert err.value.code == "conflict" and "account" in err.value.message
    # Another scope may use the same name and account.
    await conn.create_connection(services, bob, kind="github", name="gh", account_key=None, secret=SECRET)


async def test_other_scopes_connections_are_not_found(services: Any, db: Any) -> None:
    alice, bob = await owner_of(db, "alice"), await owner_of(db, "bob")
    made = await conn.create_connection(
        services, alice, kind="github", name="gh", account_key=None, secret=SECRET
    )
    for call in (
        conn.get_connection(services, bob, made["id"]),
        conn.update_connection(services, bob, made["id"], name="x"),
        conn.rotate_connection(services, bob, made["id"], SECRET),
        conn.delete_connection(services, bob, made["id"]),
        conn.test_connection(services, bob, made["id"]),
    ):
        with pytest.raises(SwitchboardError) as err:
            await call
        assert err.value.code == "not_found"
    assert await conn.list_connections(services, bob) == []
    # The instance operator (owner None) sees every scope.
    assert [c["id"] for c in await conn.list_connections(services, None)] == [made["id"]]
    assert (await conn.get_connection(services, None, made["id"]))["name"] == "gh"


async def test_update_changes_allowlists_and_keeps_what_is_left_out(services: Any, db: Any) -> None:
    alice, bob = await owner_of(db, "alice"), await owner_of(db, "bob")
    ep, _ = await vend_endpoint(db, name="alice-agent", owner=alice, families=["reply"])
    bob_ep, _ = await vend_endpoint(db, name="bob-agent", owner=bob)
    made = await conn.create_connection(
        services, alice, kind="github", name="gh", account_key=None, secret=SECRET, targets=["acme/*"]
    )
    view = await conn.update_connection(
        services, alice, made["id"], endpoints=[ep.slug], config={"note": "x"}
    )
    assert (
        view["endpoints"] == [ep.slug] and view["targets"] == ["acme/*"] and view["config"] == {"note": "x"}
    )
    view = await conn.update_connection(services, alice, made["id"], name="renamed", targets=None)
    assert view["name"] == "renamed" and view["targets"] is None and view["endpoints"] == [ep.slug]
    with pytest.raises(SwitchboardError) as err:
        await conn.update_connection(services, alice, made["id"], endpoints=[bob_ep.slug])
    assert err.value.code == "invalid_argument"


async def test_rotate_replaces_the_secret_and_fingerprint(services: Any, db: Any) -> None:
    alice = await owner_of(db, "alice")
    made = await conn.create_connection(
        services, alice, kind="slack", name="s", account_key="T0TEST", secret=SECRET
    )
    rotated = await conn.rotate_connection(services, alice, made["id"], SECRET + "-new")
    assert rotated["fingerprint"] != made["fingerprint"]
    assert rotated["fingerprint"] == services.vault.fingerprint(SECRET + "-new")
    async with db.read() as s:
        row = await s.get(Connection, made["id"])
    assert conn.open_secret(services, row) == SECRET + "-new"
    await conn.delete_connection(services, alice, made["id"])
    with pytest.raises(SwitchboardError):
        await conn.get_connection(services, alice, made["id"])


async def test_slack_test_records_the_bot_and_uses_the_bearer_token(
    services: Any, db: Any, guarded: Any, fake_slack: FakeProvider
) -> None:
    alice = await owner_of(db, "alice")
    made = await conn.create_connection(
        services, alice, kind="slack", name="s", account_key="T0TEST", secret=SECRET
    )
    verdict = await conn.test_connection(services, alice, made["id"])
    assert verdict["ok"] is True and verdict["error_class"] is None and verdict["tested_at"]
    call = fake_slack.requests[-1]
    assert (call.method, call.path, call.auth) == ("POST", "/api/auth.test", f"Bearer {SECRET}")
    view = await conn.get_connection(services, alice, made["id"])
    assert view["last_test"]["facts"] == {"bot_id": "B0BOT", "user_id": "U0BOT", "team_id": "T0TEST"}
    # A rotation keeps the facts (echo suppression needs the bot id) but not the verdict.
    rotated = await conn.rotate_connection(services, alice, made["id"], SECRET + "2")
    assert rotated["last_test"]["ok"] is None and rotated["last_test"]["facts"]["bot_id"] == "B0BOT"


async def test_slack_token_of_another_team_fails_the_test(
    services: Any, db: Any, guarded: Any, fake_slack: FakeProvider
) -> None:
    alice = await owner_of(db, "alice")
    made = await conn.create_connection(
        services, alice, kind="slack", name="s", account_key="T0OTHER", secret=SECRET
    )
    verdict = await conn.test_connection(services, alice, made["id"])
    assert verdict["ok"] is False and verdict["error_class"] == "invalid" and "T0TEST" in verdict["detail"]
    # The other workspace's bot is not learned: echo suppression must not trust it.
    assert (await conn.get_connection(services, alice, made["id"]))["last_test"]["facts"] == {}
    fake_slack.script("POST", "/api/auth.test", Scripted(200, {"ok": False, "error": "invalid_auth"}))
    verdict = await conn.test_connection(services, alice, made["id"])
    assert (verdict["ok"], verdict["error_class"]) == (False, "auth")


async def test_forge_and_cairn_tests_read_the_current_user(
    services: Any,
    db: Any,
    guarded: Any,
    fake_github: FakeProvider,
    fake_gitea: FakeProvider,
    fake_cairn: FakeProvider,
) -> None:
    alice = await owner_of(db, "alice")
    ghes = await conn.create_connection(
        services, alice, kind="github", name="ghes", account_key=fake_github.host, secret=SECRET
    )
    saas = await conn.create_connection(
        services, alice, kind="github", name="gh", account_key=None, secret=SECRET
    )
    gitea = await conn.create_connection(
        services, alice, kind="gitea", name="gt", account_key=fake_gitea.base_url, secret=SECRET
    )
    cairn = await conn.create_connection(
        services, alice, kind="cairn", name="cn", account_key=fake_cairn.base_url, secret=SECRET
    )
    for made in (ghes, saas, gitea, cairn):
        verdict = await conn.test_connection(services, alice, made["id"])
        assert verdict["ok"] is True, verdict
    assert [(r.path, r.auth) for r in fake_github.requests] == [
        ("/api/v3/user", f"Bearer {SECRET}"),  # GHES: https://{host}/api/v3
        ("/user", f"Bearer {SECRET}"),  # github.com through SWITCHBOARD_GITHUB_API_URL
    ]
    assert [(r.path, r.auth) for r in fake_gitea.requests] == [("/api/v1/user", f"token {SECRET}")]
    assert [(r.path, r.auth) for r in fake_cairn.requests] == [("/v1/tokens/self", f"Bearer {SECRET}")]
    fake_gitea.script("GET", "/api/v1/user", Scripted(401, {"message": "bad token " + SECRET}))
    verdict = await conn.test_connection(services, alice, gitea["id"])
    assert (verdict["ok"], verdict["error_class"]) == (False, "auth") and SECRET not in str(verdict)


async def test_a_private_address_fails_the_test_without_a_dial(
    services: Any, db: Any, fake_gitea: FakeProvider
) -> None:
    services.outbound = strict = guarded_client(allow_cidrs="")
    alice = await owner_of(db, "alice")
    made = await conn.create_connection(
        services, alice, kind="gitea", name="gt", account_key=fake_gitea.base_url, secret=SECRET
    )
    verdict = await conn.test_connection(services, alice, made["id"])
    await strict.close()
    assert (verdict["ok"], verdict["error_class"]) == (False, "network")
    assert fake_gitea.requests == []


async def test_team_owners_and_admins_manage_members_only_see(services: Any, db: Any) -> None:
    await owner_of(db, "olga")
    for handle in ("adam", "mia", "otto"):
        await owner_of(db, handle)
    team = await add_team(db, "platform", "olga")
    await set_member(db, "platform", "adam", "admin")
    await set_member(db, "platform", "mia", "member")
    owner = Owner(team_id=team.id)
    made = await conn.create_connection(
        services, owner, kind="github", name="team-gh", account_key=None, secret=SECRET, targets=["acme/*"]
    )
    humans = {h: (await _human_id(db, h)) for h in ("olga", "adam", "mia", "otto")}
    for handle in ("olga", "adam"):
        assert await conn.authorize(services, humans[handle], made["id"]) == owner
        await conn.check_can_manage(services, humans[handle], owner)
    with pytest.raises(SwitchboardError) as err:
        await conn.authorize(services, humans["mia"], made["id"])
    assert err.value.code == "forbidden"
    assert await conn.authorize(services, humans["mia"], made["id"], manage=False) == owner
    with pytest.raises(SwitchboardError) as err:
        await conn.check_can_manage(services, humans["mia"], owner)
    assert err.value.code == "forbidden"
    with pytest.raises(SwitchboardError) as err:
        await conn.authorize(services, humans["otto"], made["id"], manage=False)
    assert err.value.code == "not_found"
    [seen] = await conn.connections_for_human(services, humans["mia"])
    assert set(seen) == {
        "id",
        "owner",
        "owner_id",
        "kind",
        "name",
        "account_key",
        "fingerprint",
        "can_manage",
    }
    assert seen["can_manage"] is False
    [full] = await conn.connections_for_human(services, humans["adam"])
    assert full["can_manage"] is True and full["targets"] == ["acme/*"]
    assert await conn.connections_for_human(services, humans["otto"]) == []


async def _human_id(db: Any, handle: str) -> str:
    from switchboard.models import Human

    async with db.read() as s:
        return (await s.scalar(select(Human.id).where(Human.handle == handle))) or ""


async def test_the_secret_is_in_no_view_log_or_column(
    services: Any, db: Any, guarded: Any, fake_slack: FakeProvider, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    alice = await owner_of(db, "alice")
    seen: list[Any] = []
    made = await conn.create_connection(
        services, alice, kind="slack", name="s", account_key="T0TEST", secret=SECRET
    )
    seen.append(made)
    seen.append(await conn.test_connection(services, alice, made["id"]))
    seen.append(await conn.rotate_connection(services, alice, made["id"], SECRET + "X"))
    seen.append(await conn.list_connections(services, alice))
    fake_slack.script("POST", "/api/auth.test", Scripted(200, {"ok": False, "error": SECRET}))
    seen.append(await conn.test_connection(services, alice, made["id"]))
    for secret in (SECRET, SECRET + "X"):
        assert secret not in repr(seen)
        assert secret not in caplog.text
        assert await _database_contains(db, secret) == []


async def _database_contains(db: Any, needle: str) -> list[str]:
    """Every table.column whose text (or bytes) holds ``needle``."""
    hits = []
    async with db.read() as s:
        for table in Base.metadata.sorted_tables:
            rows = (await s.execute(text(f'SELECT * FROM "{table.name}"'))).all()
            for row in rows:
                for column, value in zip(table.columns.keys(), row, strict=False):
                    blob = value if isinstance(value, bytes) else str(value).encode()
                    if needle.encode() in blob:
                        hits.append(f"{table.name}.{column}")
    return hits


ECHOED_SECRET = "gh-test-secret-" + "Zq8Xv2Lm9Np4Qr7Tw3Ys"


async def _owner(db: Any, handle: str) -> Owner:
    human, _ = await add_human(db, handle)
    return Owner(human_id=human.id)


def _patch_test(services: Any, monkeypatch: pytest.MonkeyPatch, kind: str, fn: Any) -> None:
    original = services.providers.connection(kind)
    monkeypatch.setitem(services.providers.connections, kind, dataclasses.replace(original, test=fn))


async def test_redaction_survives_the_cut_of_a_long_detail(
    services: Any, db: Any, guarded: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A test verdict's detail and facts are cut to 200 characters: a secret the plugin echoed across
    the cut is redacted all the same (it was cut first, and its first characters were kept)."""

    async def echoing(check: ConnectionCheck) -> CheckResult:
        pad = "x" * 185
        return CheckResult(ok=True, detail=f"{pad} {check.secret}", facts={"login": f"{pad} {check.secret}"})

    _patch_test(services, monkeypatch, "github", echoing)
    alice = await _owner(db, "alice")
    made = await conn.create_connection(
        services, alice, kind="github", name="gh", account_key=None, secret=ECHOED_SECRET
    )
    verdict = await conn.test_connection(services, alice, made["id"])
    view = await conn.get_connection(services, alice, made["id"])
    prefix = ECHOED_SECRET[:12]
    assert prefix not in verdict["detail"], verdict["detail"]
    assert prefix not in repr(view["last_test"]), view["last_test"]


async def test_a_test_that_raced_a_rotation_does_not_vouch_for_the_new_secret(
    services: Any, db: Any, guarded: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rotation while a test of the old secret is in flight: the row keeps "secret rotated; not
    tested since", not the old secret's passing verdict (and its facts)."""
    alice = await _owner(db, "alice")
    made = await conn.create_connection(
        services, alice, kind="github", name="gh", account_key=None, secret=ECHOED_SECRET
    )
    tested: list[str] = []

    async def slow_ok(check: ConnectionCheck) -> CheckResult:
        tested.append(check.secret)
        # The owner rotates (say, after a leak) while the dial of the old secret is in flight.
        await conn.rotate_connection(services, alice, made["id"], ECHOED_SECRET + "-new")
        return CheckResult(ok=True, detail="authenticated as old-login", facts={"login": "old-login"})

    _patch_test(services, monkeypatch, "github", slow_ok)
    await conn.test_connection(services, alice, made["id"])
    assert tested == [ECHOED_SECRET]
    last = (await conn.get_connection(services, alice, made["id"]))["last_test"]
    # The new secret was never tested: the row must not say it passed.
    assert last["ok"] is None, last
