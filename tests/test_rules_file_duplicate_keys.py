"""A rules FILE that names one key twice in an object (docs/routing.md: a malformed document is
``invalid_rule``): the API answers ``duplicate_key`` and the rules page ``invalid_rule`` for such a
document, since which of the two was meant is not Switchboard's to guess. ``switchboard webhook
rules set|test`` read it with the last one winning, so a file whose second ``"rules"`` was an empty
list, left over from an edit, cleared every rule without a word.

The real ``switchboard`` click entry point on a migrated database.
"""

from __future__ import annotations

import asyncio
import json

from click.testing import CliRunner, Result

from switchboard.cli import main
from switchboard.services import Services
from switchboard.testing import TEST_ENCRYPTION_KEY, make_webhook

RULE = '{"id": "r1", "expr": ".verified", "action": {"type": "queue"}}'


async def _cli(database_url: str, *args: str, stdin: str) -> Result:
    env = {"SWITCHBOARD_DATABASE_URL": database_url, "SWITCHBOARD_SECRET_ENCRYPTION_KEY": TEST_ENCRYPTION_KEY}
    runner = CliRunner(env=env)
    return await asyncio.to_thread(runner.invoke, main, list(args), input=stdin, catch_exceptions=False)


async def test_a_rules_file_naming_a_key_twice_is_refused(services: Services, database_url: str) -> None:
    _, _, webhook_id = await make_webhook(services, "github")
    saved = await _cli(
        database_url, "webhook", "rules", "set", webhook_id, "-", "--json", stdin=f'{{"rules": [{RULE}]}}'
    )
    assert saved.exit_code == 0, (saved.stdout, saved.stderr)

    documents = {
        '{"rules": [RULE], "rules": []}': "rules",
        '{"rules": [{"id": "r1", "expr": ".verified", "expr": "false", "action": {"type": "drop"}}]}': "expr",
        '{"rules": [RULE], "default_action": {"type": "queue", "queue": "default", "queue": "x"}}': "queue",
    }
    for document, key in documents.items():
        for verb in ("set", "test"):
            text = document.replace("RULE", RULE)
            result = await _cli(database_url, "webhook", "rules", verb, webhook_id, "-", stdin=text)
            assert result.exit_code == 1, (verb, document, result.stdout, result.stderr)
            assert result.stdout == "" and result.stderr.count("\n") == 1, result.stderr
            assert result.stderr.startswith("error: invalid_rule"), result.stderr
            assert repr(key) in result.stderr, result.stderr

    shown = await _cli(database_url, "webhook", "rules", "show", webhook_id, "--json", stdin="")
    assert [r["id"] for r in json.loads(shown.stdout)["routing"]["rules"]] == ["r1"]  # unchanged
