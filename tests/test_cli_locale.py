"""The command line under a locale that is not UTF-8 (ISO-8859-1, as older servers still run): text
output holds characters such an encoding lacks (the ``…`` of a token prefix, ``→``, a sender's
title), and Python's strict encoding of stdout ended the listing in a traceback. They are shown
escaped; ``--json`` output is ASCII anyway."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from switchboard.testing import TEST_ENCRYPTION_KEY


def test_text_output_under_a_latin1_locale_is_printed_not_a_traceback(database_url: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWITCHBOARD_")}
    env.update(
        SWITCHBOARD_DATABASE_URL=database_url,
        SWITCHBOARD_SECRET_ENCRYPTION_KEY=TEST_ENCRYPTION_KEY,
        # What a de_DE.ISO-8859-1 locale gives Python's stdout and stderr (that locale need not
        # be installed here).
        PYTHONIOENCODING="latin-1",
    )

    def run(*args: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(  # noqa: S603 (our own interpreter and module)
            [sys.executable, "-m", "switchboard", *args],
            env=env,
            capture_output=True,
            timeout=60,
            check=False,
        )

    added = run("human", "add", "zoe", "--json")
    assert added.returncode == 0, added.stderr
    prefix = json.loads(added.stdout)["human"]["token_prefix"]
    assert prefix.endswith("\u2026")
    vended = run("endpoint", "vend", "--name", "Zoé Bot", "--owner", "zoe")
    assert vended.returncode == 0, vended.stderr
    pushed = run("todo", "push", "--endpoint", "zo-bot", "--title", "Déploiement → prod \u2014 ok")
    assert pushed.returncode == 0, pushed.stderr

    listed = run("human", "list")
    assert listed.returncode == 0 and listed.stderr == b"", listed.stderr
    assert listed.stdout.decode("latin-1").startswith("zoe  -  " + prefix[:-1] + "\\u2026")
    todos = run("todo", "list")
    assert todos.returncode == 0 and todos.stderr == b"", todos.stderr
    # Latin-1 characters are written as such, the others escaped.
    assert "Déploiement \\u2192 prod \\u2014 ok" in todos.stdout.decode("latin-1")
