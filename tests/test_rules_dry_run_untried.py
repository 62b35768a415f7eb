"""The rules dry run on kinds whose stored deliveries Switchboard cannot read again (docs/routing.md,
"Saving is safe"): Linear and Plain sign with a secret scheme of their own, so a stored delivery
cannot be re-signed and put through the verifier again. The rules are not tried on such a delivery:
the answer must say so (``untried`` and a line in the CLI's table), not let the owner believe that
a rule set which faults on every one of them was checked.

Real signed deliveries posted over HTTP to the test server; ``switchboard webhook rules set|test``
through the real click entry point.
"""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from datetime import UTC, datetime
from typing import Any

import aiohttp
import pytest
from click.testing import CliRunner, Result

from switchboard import tenancy
from switchboard.cli import main
from switchboard.services import Services
from switchboard.testing import TEST_ENCRYPTION_KEY, hexmac, make_webhook, post

CSRF_RE = re.compile(r'name="csrf" value="([^"]+)"')
FAULTY = {"rules": [{"id": "boom", "expr": '.payload | error("boom")', "action": {"type": "drop"}}]}


def _linear(secret: str) -> tuple[bytes, dict[str, str]]:
    body = json.dumps(
        {
            "action": "create",
            "type": "Comment",
            "organizationId": str(uuid.uuid4()),
            "webhookTimestamp": int(datetime.now(UTC).timestamp() * 1000),
            "webhookId": str(uuid.uuid4()),
            "data": {"id": str(uuid.uuid4()), "body": "hello", "issueId": str(uuid.uuid4())},
        }
    ).encode()
    return body, {"Linear-Signature": hexmac(secret, body), "Linear-Delivery": str(uuid.uuid4())}


def _plain(secret: str) -> tuple[bytes, dict[str, str]]:
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    body = json.dumps(
        {
            "id": f"pEv_{uuid.uuid4().hex}",
            "type": "thread.thread_created",
            "timestamp": stamp,
            "workspaceId": "w_1",
            "payload": {"eventType": "thread.thread_created", "thread": {"id": "th_1"}},
        }
    ).encode()
    return body, {"Plain-Request-Signature": hexmac(secret, body)}


SIGNERS = {"linear": _linear, "plain": _plain}


def _cli(database_url: str, *args: str, stdin: str) -> Result:
    env = {"SWITCHBOARD_DATABASE_URL": database_url, "SWITCHBOARD_SECRET_ENCRYPTION_KEY": TEST_ENCRYPTION_KEY}
    return CliRunner(env=env).invoke(main, list(args), input=stdin, catch_exceptions=False)


async def _run(database_url: str, *args: str, stdin: str) -> Result:
    return await asyncio.to_thread(_cli, database_url, *args, stdin=stdin)


@pytest.mark.parametrize("kind", ["linear", "plain"])
async def test_a_dry_run_says_which_stored_deliveries_the_rules_were_not_tried_on(
    services: Services, base_url: str, database_url: str, kind: str
) -> None:
    token, secret, webhook_id = await make_webhook(services, kind)
    assert secret is not None
    body, headers = SIGNERS[kind](secret)
    status, answer, _ = await post(base_url, token, body, headers)
    assert status == 202 and answer["disposition"] == "routed", answer

    # `rules test --json`: the row is skipped and the answer counts it as untried, saying why.
    result = await _run(
        database_url, "webhook", "rules", "test", webhook_id, "-", "--json", stdin=json.dumps(FAULTY)
    )
    assert result.exit_code == 0, (result.stdout, result.stderr)
    dry: dict[str, Any] = json.loads(result.stdout)
    assert dry["error"] is None and dry["saved"] is False
    [row] = dry["results"]
    assert row["disposition"] == "skipped" and row["fault"] is None
    assert f"cannot sign {kind} deliveries again" in row["why"], row["why"]
    assert dry["untried"] == 1

    # `rules set`: saved (nothing could refuse it), and the text says the rules were not tried.
    result = await _run(database_url, "webhook", "rules", "set", webhook_id, "-", stdin=json.dumps(FAULTY))
    assert result.exit_code == 0, (result.stdout, result.stderr)
    assert "not tried on 1 stored delivery" in result.stdout, result.stdout
    assert "saved: webhook" in result.stdout.splitlines()[-1]


async def test_the_rules_page_says_the_rules_were_not_tried_when_saving_on_linear(
    services: Services, base_url: str
) -> None:
    _, login_token = await tenancy.add_human(services.db, "ada")
    token, secret, webhook_id = await make_webhook(services, "linear")
    assert secret is not None
    body, headers = _linear(secret)
    status, answer, _ = await post(base_url, token, body, headers)
    assert status == 202, answer

    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
        async with http.get(f"{base_url}/ui/login") as resp:
            found = CSRF_RE.search(await resp.text())
        assert found is not None
        login = {"csrf": found.group(1), "token": login_token}
        async with http.post(f"{base_url}/ui/login", data=login, allow_redirects=False) as resp:
            assert resp.status == 303
        async with http.get(f"{base_url}/ui/webhooks/{webhook_id}") as resp:
            found = CSRF_RE.search(await resp.text())
        assert found is not None
        for do in ("preview", "save"):
            form = {"csrf": found.group(1), "do": do, "rules": json.dumps(FAULTY)}
            url = f"{base_url}/ui/webhooks/{webhook_id}/rules"
            async with http.post(url, data=form, allow_redirects=False) as resp:
                page = await resp.text()
                assert resp.status == 200, (do, resp.status, resp.headers.get("Location"))
            assert "The rules were not tried on 1 of these" in page, do
            assert "cannot sign linear deliveries again" in page
            assert ("Saved." if do == "save" else "Nothing was saved.") in page
