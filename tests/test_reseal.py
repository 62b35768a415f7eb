"""Secrets stored in plaintext before an encryption key existed (issue 13, item 9): ``serve`` warns
with their count, ``switchboard db reseal`` seals them in one transaction, and on SQLite the old
plaintext survives neither in the database file (free pages, old cells) nor in its write-ahead log.
Deliveries signed with the secrets still verify afterwards."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestServer
from sqlalchemy import event, select
from sqlalchemy.engine import make_url

from switchboard import reseal, tenancy, webhook_ops
from switchboard.app import make_app
from switchboard.errors import SwitchboardError
from switchboard.models import Webhook
from switchboard.services import Services
from switchboard.testing import ServeProcesses, github_headers, make_webhook, post
from switchboard.vault import PLAINTEXT_KEY_ID, Vault

ISSUE = (Path(__file__).parent / "fixtures" / "github" / "issues" / "opened.payload.json").read_bytes()


def without_key(services: Services) -> Services:
    """The same database and providers, as a server started before a key was configured."""
    return Services(
        settings=services.settings.model_copy(update={"secret_encryption_key": None}),
        db=services.db,
        vault=Vault(None),
        providers=services.providers,
    )


def sqlite_files(services: Services) -> list[Path]:
    database = make_url(services.settings.database_url).database
    assert database
    return [p for p in (Path(database), Path(database + "-wal")) if p.exists()]


def wal_size(services: Services) -> int:
    wal = Path(str(sqlite_files(services)[0]) + "-wal")
    return wal.stat().st_size if wal.exists() else 0


def raw_bytes(services: Services) -> bytes:
    return b"".join(p.read_bytes() for p in sqlite_files(services))


async def plaintext_world(services: Services) -> dict[str, str]:
    """Webhooks made without a key: two minted secrets (one rotated, so an older plaintext was
    freed), a provider-issued one, and 41 deleted ones. Returns {webhook id: current secret}, the
    rotated-away secret ("old"), the deleted ones ("gone", and "gone_too" space-separated) and the
    first two webhooks' ingest tokens ("token_a", "token_b")."""
    bare = without_key(services)
    token_a, secret_a, id_a = await make_webhook(bare, "github", endpoint="ada-agent")
    token_b, old, id_b = await make_webhook(bare, "github", endpoint="ada-agent")
    _, secret_c, id_c = await make_webhook(bare, "slack", endpoint="ada-agent")
    _, gone, id_gone = await make_webhook(bare, "github", endpoint="ada-agent")
    # Enough deleted webhooks to free whole pages, whose old content SQLite keeps unless told.
    many = [await make_webhook(bare, "github", endpoint="ada-agent") for _ in range(40)]
    if services.db.is_sqlite:
        # An instance that ran a while: the plaintext is in the database file, not only the log.
        async with services.db.engine.connect() as conn:
            driver = (await conn.get_raw_connection()).driver_connection
            await (await driver.execute("PRAGMA wal_checkpoint(TRUNCATE)")).close()
    secret_b = await tenancy.rotate_webhook_secret(bare.db, bare.vault, bare.providers, id_b)
    # A webhook deleted while its secret was plaintext leaves that secret in a freed cell.
    await tenancy.delete_webhook(bare.db, id_gone)
    for _, _, webhook_id in many:
        await tenancy.delete_webhook(bare.db, webhook_id)
    gone_too = " ".join(secret or "" for _, secret, _ in many)
    assert secret_a and old and secret_c and gone
    return {
        id_a: secret_a,
        id_b: secret_b,
        id_c: secret_c,
        "old": old,
        "gone": gone,
        "gone_too": gone_too,
        "token_a": token_a,
        "token_b": token_b,
    }


def secure_delete_off_by_default(services: Services) -> None:
    """Connections as a SQLite built without SQLITE_SECURE_DELETE opens them (Debian's build turns it
    on by default), so the test holds for the builds that do not."""

    def off(dbapi_connection: Any, _record: object) -> None:
        dbapi_connection.execute("PRAGMA secure_delete=OFF")

    event.listen(services.db.engine.sync_engine, "connect", off)


async def test_reseal_seals_every_plaintext_secret_and_leaves_no_copy(services: Services) -> None:
    if services.db.is_sqlite:
        secure_delete_off_by_default(services)
    world = await plaintext_world(services)
    secrets = [world[k] for k in world if k not in ("token_a", "token_b", "gone_too")] + world[
        "gone_too"
    ].split()
    assert len(secrets) == 45
    current = {k: v for k, v in world.items() if k.startswith("wh")}
    if services.db.is_sqlite:
        # The test could fail: before the reseal the plaintext is in the files.
        assert any(s.encode() in raw_bytes(services) for s in secrets)
    # Three current secrets, and the previous one the rotation keeps for its overlap.
    assert await reseal.plaintext_count(services) == 4

    done = await reseal.reseal(services)
    assert done.count == 4
    assert await reseal.plaintext_count(services) == 0
    async with services.db.read() as s:
        rows = (await s.scalars(select(Webhook))).all()
    assert {row.secret_key_id for row in rows} == {services.vault.key_id}
    [rotated] = [row for row in rows if row.previous_secret_ciphertext is not None]
    assert rotated.previous_secret_key_id == services.vault.key_id
    assert webhook_ops.previous_secret(services.vault, rotated) == world["old"]
    for row in rows:
        assert row.secret_ciphertext is not None
        for sealed in (row.secret_ciphertext, row.previous_secret_ciphertext or b""):
            assert all(secret.encode() not in sealed for secret in secrets)
        assert tenancy.webhook_secret(services.vault, row) == current[row.id]

    if services.db.is_sqlite:
        assert done.wal_truncated is True
        assert wal_size(services) == 0
        data = raw_bytes(services)
        survived = [secret for secret in secrets if secret.encode() in data]
        assert not survived, f"{len(survived)} plaintext secret(s) survived in the SQLite files"
    else:
        assert done.wal_truncated is None

    # Idempotent: nothing left to seal.
    assert (await reseal.reseal(services)).count == 0


async def test_resealed_secrets_still_verify_deliveries(services: Services) -> None:
    world = await plaintext_world(services)
    await reseal.reseal(services)
    server = TestServer(make_app(services), host="127.0.0.1")
    await server.start_server()
    try:
        base_url = str(server.make_url("")).rstrip("/")
        webhook_a = next(k for k in world if k.startswith("wh"))
        headers = github_headers(world[webhook_a], ISSUE, "issues", "d-resealed")
        status, answer, _ = await post(base_url, world["token_a"], ISSUE, headers)
        assert status == 202 and answer["verified"] is True, answer
        # The rotated-away secret, resealed too, still verifies during its overlap.
        headers = github_headers(world["old"], ISSUE, "issues", "d-old")
        status, answer, _ = await post(base_url, world["token_b"], ISSUE, headers)
        assert status == 202 and answer["verified"] is True, answer
        # Another webhook's secret is refused.
        headers = github_headers(world["old"], ISSUE, "issues", "d-other")
        status, _, _ = await post(base_url, world["token_a"], ISSUE, headers)
        assert status == 401
    finally:
        await server.close()


async def test_reseal_without_a_key_is_refused(services: Services) -> None:
    await plaintext_world(services)
    with pytest.raises(SwitchboardError) as err:
        await reseal.reseal(without_key(services))
    assert err.value.code == "encryption_required"
    assert await reseal.plaintext_count(services) == 4


async def test_the_server_warns_with_the_count_at_start(
    services: Services, caplog: pytest.LogCaptureFixture
) -> None:
    await plaintext_world(services)
    caplog.set_level(logging.WARNING, logger="switchboard")
    server = TestServer(make_app(services), host="127.0.0.1")
    await server.start_server()
    await server.close()
    warnings = [r.getMessage() for r in caplog.records if "db reseal" in r.getMessage()]
    assert warnings == [
        "4 secret(s) are stored in plaintext from before SWITCHBOARD_SECRET_ENCRYPTION_KEY was "
        "configured; run `switchboard db reseal` to seal them"
    ]
    caplog.clear()
    await reseal.reseal(services)
    server = TestServer(make_app(services), host="127.0.0.1")
    await server.start_server()
    await server.close()
    assert not [r for r in caplog.records if "db reseal" in r.getMessage()]


async def test_serve_warns_and_the_cli_reseals(services: Services, switchboard_serve: ServeProcesses) -> None:
    """The operator's path, as processes: serve logs the count, `db reseal` seals and says so."""
    await plaintext_world(services)
    await services.db.dispose()
    server = await switchboard_serve.start()
    await server.stop()
    assert "4 secret(s) are stored in plaintext" in server.check_log()
    answer = await server.cli("db", "reseal")
    assert answer["resealed"] == 4
    assert answer["wal_truncated"] is (True if services.db.is_sqlite else None)
    again = await server.run("db", "reseal")
    assert again.returncode == 0 and again.stdout.strip() == "sealed 0 plaintext-stored secret(s)"
    async with services.db.read() as s:
        key_ids = set((await s.scalars(select(Webhook.secret_key_id))).all())
    assert key_ids == {services.vault.key_id} and PLAINTEXT_KEY_ID not in key_ids
