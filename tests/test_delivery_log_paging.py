"""The delivery log pages by id: a row the recorder writes later than it was noted (a minute's
count of refusals past the bound) is still seen by a client paging newer; and a webhook deleted
while the recorder writes costs no other webhook its rows."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import pytest
from sqlalchemy import select

from switchboard import deliveries, tenancy
from switchboard.delivery_records import DeliveryRecorder
from switchboard.models import DeliveryRecord
from switchboard.services import Services
from switchboard.testing import engine_name, make_webhook, post


async def test_counted_refusals_row_is_not_skipped_by_a_client_paging_newer(
    services: Services, server: Any, base_url: str
) -> None:
    """docs/api.md (Pages): walking either way never skips a row, however many arrive in between.
    The row counting a minute's refusals past the bound is written when that minute ends; its id
    was minted at the first counted refusal, so a client that had walked past that time with
    ``after`` never saw it. Ids are now minted as rows are written."""
    db = services.db
    await tenancy.add_human(db, "ada")
    ada = await tenancy.resolve_owner(db, human="ada")
    await tenancy.vend_endpoint(db, name="Ada Agent", owner=ada)
    made = await tenancy.create_webhook(
        db, services.vault, services.providers, endpoint_slug="ada-agent", source="generic"
    )
    webhook_id = made.webhook.id
    recorder = DeliveryRecorder(services, per_minute=1)
    try:
        recorder.refused(webhook_id, 429, "rate_limited", "too many", None)  # recorded one by one
        recorder.refused(webhook_id, 429, "rate_limited", "too many", None)  # counted for the minute
        assert await recorder.flush(ended_only=True) == 1  # the minute is still open

        # A stored delivery after those refusals.
        status, answer, _ = await post(
            base_url, made.ingest_token, b'{"n": 1}', {"Content-Type": "application/json"}
        )
        assert status == 202, answer

        # A client reads the log: its newest row is that delivery; it will poll for newer ones.
        first = await deliveries.list_deliveries(db, webhook_id)
        assert [r["stored"] for r in first.rows] == [True, False]
        newest = first.rows[0]["id"]

        # The minute ends: the counted row is written now.
        assert await recorder.flush() == 1
        every = await deliveries.list_deliveries(db, webhook_id)
        assert len(every.rows) == 3
        counted = next(r for r in every.rows if r["count"] > 1 or "counted" in r["detail"])

        # The client's next poll for rows newer than what it has seen must bring that row.
        newer = await deliveries.list_deliveries(db, webhook_id, after=newest)
        seen = {r["id"] for r in first.rows} | {r["id"] for r in newer.rows}
        assert counted["id"] in seen, (every.rows, newer.rows)
    finally:
        await recorder.close()


@pytest.mark.skipif(engine_name() != "postgresql", reason="PostgreSQL's concurrent transactions")
async def test_a_webhook_deleted_while_the_log_is_written_costs_no_other_webhook_its_rows(
    services: Services, database_url: str
) -> None:
    """The recorder writes every webhook's notes in one insert, after reading which webhooks still
    exist. A webhook deleted by a transaction that committed between that read and the insert made
    the insert's foreign key fail, and the whole flush was dropped: one tenant deleting its webhook
    lost other tenants' refusals. The read now holds the webhooks it found until the insert."""
    _, _, kept = await make_webhook(services, "generic", owner="ada", endpoint="ada-agent")
    _, _, going = await make_webhook(services, "generic", owner="bob", endpoint="bob-agent")
    recorder = DeliveryRecorder(services)
    url = database_url.replace("postgresql+asyncpg://", "postgresql://")
    deleting = await asyncpg.connect(url)
    try:
        recorder.refused(kept, 401, "signature_invalid", "bad signature", None)
        recorder.refused(going, 401, "signature_invalid", "bad signature", None)
        async with deleting.transaction():
            await deleting.execute("DELETE FROM webhooks WHERE id = $1", going)
            # The flush reads both webhooks (the delete is not committed yet) while it runs.
            flushing = asyncio.create_task(recorder.flush())
            await asyncio.sleep(0.5)
        written = await asyncio.wait_for(flushing, 10)
    finally:
        await deleting.close()
        await recorder.close()
    async with services.db.read() as s:
        rows = (await s.scalars(select(DeliveryRecord.webhook_id))).all()
    assert rows == [kept] and written == 1
