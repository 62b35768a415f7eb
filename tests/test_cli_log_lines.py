"""A command's stderr is its own: a refusal is exactly one ``error: CODE: message`` line, and a
command that answers on stdout adds nothing to stderr (docs/cli.md, "Output, errors and exit
codes"). The CLI has no log handler, so a warning the core logs while a command runs (the rule
sandbox killing a worker past its time limit) reached stderr through Python's last-resort handler,
unprefixed: `webhook rules set` printed it above its one error line, `webhook rules test` under its
answer. Real processes: pytest's own log capture would hide the last-resort handler in-process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from switchboard.testing import TEST_ENCRYPTION_KEY

# A rule that never ends: the sandbox kills its worker at the time limit, and logs that it did.
ENDLESS = {"rules": [{"id": "spin", "expr": "def f: f; f", "action": {"type": "drop"}}]}


def _run(database_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWITCHBOARD_")}
    env.update(
        {
            "SWITCHBOARD_DATABASE_URL": database_url,
            "SWITCHBOARD_SECRET_ENCRYPTION_KEY": TEST_ENCRYPTION_KEY,
        }
    )
    return subprocess.run(  # noqa: S603 (our own interpreter and module)
        [sys.executable, "-m", "switchboard", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _webhook_with_a_stored_delivery(database_url: str) -> str:
    for args in (("human", "add", "ada"), ("endpoint", "vend", "--name", "ada-bot", "--owner", "ada")):
        done = _run(database_url, *args)
        assert done.returncode == 0, done.stderr
    created = _run(
        database_url, "webhook", "create", "--endpoint", "ada-bot", "--source", "generic", "--json"
    )
    assert created.returncode == 0, created.stderr
    webhook_id: str = json.loads(created.stdout)["webhook"]["id"]
    sent = _run(database_url, "webhook", "test", webhook_id)
    assert sent.returncode == 0 and sent.stderr == "", sent.stderr
    return webhook_id


def test_rules_that_time_out_in_the_dry_run_print_one_error_line_and_no_log_lines(
    database_url: str, tmp_path: Path
) -> None:
    webhook_id = _webhook_with_a_stored_delivery(database_url)
    rules = tmp_path / "rules.json"
    rules.write_text(json.dumps(ENDLESS))

    refused = _run(database_url, "webhook", "rules", "set", webhook_id, str(rules))
    assert refused.returncode == 1, refused.stderr
    assert refused.stdout == ""
    assert refused.stderr.count("\n") == 1, refused.stderr
    assert refused.stderr.startswith("error: invalid_rule: "), refused.stderr
    assert "time limit" in refused.stderr

    tested = _run(database_url, "webhook", "rules", "test", webhook_id, str(rules), "--json")
    assert tested.returncode == 1, tested.stderr
    answer = json.loads(tested.stdout)
    assert answer["saved"] is False and answer["error"]["code"] == "invalid_rule"
    assert tested.stderr == ""
