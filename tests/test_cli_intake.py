"""The intake commands as the instance operator types them (docs/cli.md, docs/routing.md): the
trust choice at ``webhook create``, ``webhook trust``, ``webhook show|list`` with trust and the
quarantined count, ``webhook rules set|test|show`` with their dry run and every refusal a file can
earn, and ``quarantine list|release|discard`` on real, signed GitHub deliveries (octokit's payloads)
that a running server quarantined.

Every command runs through the real ``switchboard`` click entry point (``CliRunner``, in a thread:
the server runs on the test's loop), on the same database as the server.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from switchboard.cli import main
from switchboard.testing import TEST_ENCRYPTION_KEY, github_headers, post

FIXTURES = Path(__file__).parent / "fixtures" / "github"
REVIEW = "pull_request_review/submitted.payload.json"
COMMENT = "issue_comment/created.payload.json"


class Cli:
    def __init__(self, database_url: str, base_url: str = "https://switchboard.example.test") -> None:
        env = {
            "SWITCHBOARD_DATABASE_URL": database_url,
            "SWITCHBOARD_SECRET_ENCRYPTION_KEY": TEST_ENCRYPTION_KEY,
            "SWITCHBOARD_BASE_URL": base_url,
        }
        self.runner = CliRunner(env=env)

    async def run(self, *args: str, input: bytes | str | None = None) -> Result:
        return await asyncio.to_thread(
            self.runner.invoke, main, list(args), input=input, catch_exceptions=False
        )

    async def ok(self, *args: str, input: bytes | str | None = None) -> dict[str, Any]:
        """The one JSON object a successful ``--json`` command printed."""
        result = await self.run(*args, "--json", input=input)
        assert result.exit_code == 0 and result.stderr == "", (args, result.stdout, result.stderr)
        return dict(json.loads(result.stdout))

    async def text(self, *args: str, input: bytes | str | None = None) -> str:
        result = await self.run(*args, input=input)
        assert result.exit_code == 0 and result.stderr == "", (args, result.stdout, result.stderr)
        return result.stdout

    async def refused(self, *args: str, code: str, exit_code: int = 1, input: str | None = None) -> str:
        """One line on stderr naming ``code``, nothing on stdout, never a traceback."""
        result = await self.run(*args, input=input)
        assert result.exit_code == exit_code, (args, result.stdout, result.stderr)
        assert result.stdout == "" and result.stderr.count("\n") == 1, result.stderr
        assert result.stderr.startswith(f"error: {code}"), result.stderr
        assert "Traceback" not in result.stderr
        return result.stderr


@pytest.fixture
def cli(database_url: str) -> Cli:
    return Cli(database_url)


@pytest.fixture
def served_cli(database_url: str, base_url: str) -> Cli:
    """The CLI printing ingest URLs on the running test server."""
    return Cli(database_url, base_url)


async def _ada(cli: Cli) -> None:
    """Human ada with endpoint ``ada-agent`` on queues default and reviews."""
    await cli.ok("human", "add", "ada")
    await cli.ok(
        "endpoint",
        "vend",
        "--name",
        "Ada Agent",
        "--owner",
        "ada",
        "--queue",
        "default",
        "--queue",
        "reviews",
    )


class Hook:
    """A GitHub webhook the CLI created, and how to send it octokit's deliveries as GitHub does."""

    def __init__(self, created: dict[str, Any]) -> None:
        self.id: str = created["webhook"]["id"]
        self.secret: str = created["secret"]
        base_url, _, self.token = created["ingest_url"].rpartition("/webhooks/")
        self.base_url = base_url

    async def deliver(self, name: str, *, sender: str = "Codertocat") -> dict[str, Any]:
        payload = json.loads((FIXTURES / name).read_bytes())
        payload["sender"]["login"] = sender
        payload["switchboard_test"] = str(uuid.uuid4())  # every body its own delivery
        body = json.dumps(payload).encode()
        headers = github_headers(self.secret, body, name.split("/")[0], str(uuid.uuid4()))
        status, answer, _ = await post(self.base_url, self.token, body, headers)
        assert status == 202, answer
        return answer


async def _github(cli: Cli, *trust: str) -> Hook:
    created = await cli.ok("webhook", "create", "--endpoint", "ada-agent", "--source", "github", *trust)
    return Hook(created)


# ---------------------------------------------------------------------------------------------
# webhook create: the trust choice


async def test_create_requires_the_trust_choice_where_the_kind_names_actors(cli: Cli) -> None:
    await _ada(cli)
    create = ("webhook", "create", "--endpoint", "ada-agent", "--source")

    line = await cli.refused(*create, "github", code="trust_required")
    assert "--trust ACTOR" in line and "--allow-all" in line and "GitHub login" in line
    assert "Cairn actor id" in await cli.refused(*create, "cairn", code="trust_required")
    # A body anyone holding the URL writes proves no name; slack names nobody.
    for source in ("generic", "slack"):
        await cli.refused(*create, source, "--trust", "octocat", code="trust_not_supported")
        await cli.refused(*create, source, "--allow-all", code="trust_not_supported")
    await cli.refused(*create, "github", "--allow-all", "--trust", "octocat", code="invalid_trust")
    await cli.refused(*create, "github", "--allow-all", "--match", "author", code="invalid_trust")
    await cli.refused(*create, "github", "--match", "author", code="invalid_trust")
    await cli.refused(*create, "cairn", "--actor-id", "usr_1", "--match", "author", code="invalid_trust")
    await cli.refused(*create, "github", "--trust", "", code="invalid_trust")
    await cli.refused(*create, "github", "--trust", "x", "--match", "anyone", code="usage", exit_code=2)
    assert (await cli.ok("webhook", "list"))["webhooks"] == []  # nothing was written

    # --trust, --login and --actor-id are one option filling the kind's list, whatever it is called.
    github = (await cli.ok(*create, "github", "--trust", "Octocat", "--login", "hubot", "--match", "author"))[
        "webhook"
    ]
    assert github["trust"] == {"logins": ["hubot", "Octocat"], "match": "author"}
    assert github["trust_described"] == "trusted GitHub logins: hubot, Octocat (match: author)"
    assert (github["quarantined"], github["rules"]) == (0, 0)
    cairn = (await cli.ok(*create, "cairn", "--actor-id", "usr_b", "--trust", "usr_a"))["webhook"]
    assert cairn["trust"] == {"actor_ids": ["usr_a", "usr_b"]}
    gitea = (await cli.ok(*create, "gitea", "--allow-all"))["webhook"]
    assert gitea["trust"] == {"allow_all": True} and gitea["trust_described"] == "all actors allowed"
    generic = (await cli.ok(*create, "generic"))["webhook"]
    assert generic["trust"] is None and generic["trust_described"] == "not available for this kind"
    out = await cli.text(*create, "github", "--login", "octocat")
    assert "trust: trusted GitHub login: octocat (match: sender)" in out

    listed = {w["id"]: w for w in (await cli.ok("webhook", "list"))["webhooks"]}
    assert listed[github["id"]]["trust"] == github["trust"]
    assert listed[cairn["id"]]["trust_described"] == "trusted Cairn actor ids: usr_a, usr_b"
    assert all(w["quarantined"] == 0 and w["rules"] == 0 for w in listed.values())
    table = await cli.text("webhook", "list")
    assert "trust: all actors allowed" in table and "quarantined:0" in table


async def test_webhook_trust_shows_and_replaces_the_setting(cli: Cli) -> None:
    await _ada(cli)
    hook = (
        await cli.ok(
            "webhook", "create", "--endpoint", "ada-agent", "--source", "github", "--trust", "octocat"
        )
    )["webhook"]["id"]

    shown = await cli.ok("webhook", "trust", hook)
    assert shown["trust"] == {"logins": ["octocat"], "match": "sender"}
    assert shown["supported"] is True and shown["label"] == "GitHub login"
    assert shown["matches"] == ["sender", "author", "both"]
    assert await cli.text("webhook", "trust", hook) == (
        f"webhook {hook}: trusted GitHub login: octocat (match: sender)\n"
    )

    both = await cli.ok(
        "webhook", "trust", hook, "--login", "Monalisa", "--actor-id", "hubot", "--match", "both"
    )
    assert both["trust"] == {"logins": ["hubot", "Monalisa"], "match": "both"}
    assert "trust saved: trusted GitHub logins: hubot, Monalisa (match: both)" in await cli.text(
        "webhook", "trust", hook, "--login", "hubot", "--login", "Monalisa", "--match", "both"
    )
    assert (await cli.ok("webhook", "show", hook))["webhook"]["trust"] == both["trust"]

    # Refusals change nothing.
    await cli.refused("webhook", "trust", hook, "--allow-all", "--login", "x", code="invalid_trust")
    await cli.refused("webhook", "trust", hook, "--match", "author", code="invalid_trust")
    await cli.refused("webhook", "trust", hook, "--login", "a" * 101, code="invalid_trust")
    await cli.refused("webhook", "trust", "wh_nope", code="not_found")
    await cli.refused("webhook", "trust", "wh_nope", "--allow-all", code="not_found")
    assert (await cli.ok("webhook", "trust", hook))["trust"] == both["trust"]

    assert (await cli.ok("webhook", "trust", hook, "--allow-all"))["trust"] == {"allow_all": True}
    assert "trust: all actors allowed" in await cli.text("webhook", "show", hook)

    generic = (await cli.ok("webhook", "create", "--endpoint", "ada-agent", "--source", "generic"))["webhook"]
    view = await cli.ok("webhook", "trust", generic["id"])
    assert view["supported"] is False and view["trust"] is None
    await cli.refused("webhook", "trust", generic["id"], "--login", "x", code="trust_not_supported")
    await cli.refused("webhook", "show", "wh_nope", code="not_found")


# ---------------------------------------------------------------------------------------------
# webhook rules


RULES = {
    "rules": [
        {
            "id": "reviews",
            "name": "PR reviews",
            "expr": '.event | startswith("pull_request_review")',
            "action": {"type": "queue", "queue": "reviews", "once": True},
        },
        {
            "id": "mentions",
            "expr": '(.payload.comment.body // "") | test("@" + $params.bot)',
            "action": {"type": "queue"},
        },
    ],
    "default_action": {"type": "drop"},
    "params": {"bot": "ourbot"},
}


async def test_rules_test_set_show_with_the_dry_run_on_stored_deliveries(
    served_cli: Cli, tmp_path: Path
) -> None:
    cli = served_cli
    await _ada(cli)
    hook = await _github(cli, "--allow-all")
    await hook.deliver(REVIEW)
    await hook.deliver(COMMENT)
    delivered = {d["event"]: d["id"] for d in (await cli.ok("webhook", "deliveries", hook.id))["deliveries"]}
    review, comment = delivered["pull_request_review.submitted"], delivered["issue_comment.created"]
    rules_file = tmp_path / "rules.json"
    rules_file.write_text(json.dumps(RULES))

    shown = await cli.ok("webhook", "rules", "show", hook.id)
    assert shown["active"] is False and shown["rules"] == 0
    assert "no rules" in await cli.text("webhook", "rules", "show", hook.id)

    tried = await cli.ok("webhook", "rules", "test", hook.id, str(rules_file))
    assert tried["saved"] is False and tried["error"] is None
    results = {row["delivery"]: row for row in tried["results"]}
    assert results[review]["disposition"] == "routed" and results[review]["rule"] == "reviews"
    assert results[review]["todos"] == [{"endpoint": "ada-agent", "queue": "reviews", "once": True}]
    assert results[comment]["disposition"] == "dropped" and results[comment]["by"] == "default"
    assert results[comment]["was"] == "routed"
    assert (await cli.ok("webhook", "rules", "show", hook.id))["active"] is False  # test saved nothing

    text = await cli.text("webhook", "rules", "test", hook.id, str(rules_file))
    lines = text.splitlines()
    review_line = next(line for line in lines if line.startswith(review))
    assert "routed → routed" in review_line and "rule reviews" in review_line
    assert "ada-agent/reviews (once)" in review_line
    comment_line = next(line for line in lines if line.startswith(comment))
    assert "routed → dropped" in comment_line and "no todo" in comment_line
    assert "dry run on the 2 newest stored deliveries: 1 dropped, 1 routed" in text
    assert lines[-1].startswith("not saved (test)")

    # `-` reads the file from stdin.
    saved = await cli.ok("webhook", "rules", "set", hook.id, "-", input=json.dumps(RULES))
    assert saved["saved"] is True and len(saved["results"]) == 2
    stored = await cli.ok("webhook", "rules", "show", hook.id)
    assert stored["active"] is True and stored["rules"] == 2
    assert [r["id"] for r in stored["routing"]["rules"]] == ["reviews", "mentions"]
    assert stored["routing"]["default_action"] == {"type": "drop"}
    assert stored["routing"]["params"] == {"bot": "ourbot"}
    show_text = await cli.text("webhook", "rules", "show", hook.id)
    assert (
        "2 rules, first match wins" in show_text
        and "1. reviews (PR reviews) → queue reviews once" in show_text
    )
    assert "default: drop" in show_text and 'params: {"bot": "ourbot"}' in show_text
    assert (await cli.ok("webhook", "show", hook.id))["webhook"]["rules"] == 2
    assert "saved: webhook" in await cli.text("webhook", "rules", "set", hook.id, str(rules_file))

    # A rule that faults on a stored delivery: `test` shows the table and exits 1; `set` refuses.
    faulty = {"rules": [{"id": "boom", "expr": '.payload | error("boom")', "action": {"type": "drop"}}]}
    rules_file.write_text(json.dumps(faulty))
    result = await cli.run("webhook", "rules", "test", hook.id, str(rules_file), "--json")
    assert result.exit_code == 1, (result.stdout, result.stderr)
    answer = json.loads(result.stdout)
    assert answer["saved"] is False and answer["error"]["code"] == "invalid_rule"
    assert answer["error"]["rule"] == "boom" and len(answer["results"]) == 2
    assert all(row["disposition"] == "faulted" and row["fault"] for row in answer["results"])
    result = await cli.run("webhook", "rules", "test", hook.id, str(rules_file))
    assert result.exit_code == 1 and "not saved: would be refused: invalid_rule" in result.stdout
    line = await cli.refused("webhook", "rules", "set", hook.id, str(rules_file), code="invalid_rule")
    assert "boom" in line and "rules test" in line
    assert (await cli.ok("webhook", "rules", "show", hook.id))["rules"] == 2  # unchanged

    # An empty rule set clears them.
    cleared = await cli.ok("webhook", "rules", "set", hook.id, "-", input='{"rules": []}')
    assert cleared["saved"] is True and cleared["routing"]["rules"] == []
    assert (await cli.ok("webhook", "rules", "show", hook.id))["active"] is False


async def test_every_refusal_a_rules_file_can_earn(cli: Cli, tmp_path: Path) -> None:
    await _ada(cli)
    hook = await _github(cli, "--allow-all")

    def rule(expr: str = ".verified", **action: Any) -> dict[str, Any]:
        return {"id": "r1", "expr": expr, "action": {"type": "queue", **action}}

    refusals: list[tuple[Any, str, str]] = [
        ([rule()], "invalid_rule", "must be a JSON object"),
        ({"rules": [rule()], "extra": 1}, "invalid_rule", "unknown key"),
        ({"rules": [rule(), rule()]}, "invalid_rule", "used twice"),
        ({"rules": [{**rule(), "id": "Bad Id"}]}, "invalid_rule", "id must match"),
        ({"rules": [rule(expr=".payload | (")]}, "invalid_expression", "r1"),
        ({"rules": [rule(expr="x" * 5000)]}, "invalid_expression", "bytes"),
        ({"rules": [rule(expr="env.HOME")]}, "forbidden_function", "env"),
        ({"rules": [rule(expr="$ENV.PATH")]}, "forbidden_function", "$ENV"),
        ({"rules": [rule(expr="input")]}, "forbidden_function", "input"),
        ({"rules": [rule(expr="now > 0")]}, "forbidden_function", "now"),
        ({"rules": [rule(queue="ci")]}, "not_granted", "'ci'"),
        ({"rules": [rule(endpoints=["ada-agent"], queue="nope")]}, "not_granted", "ada-agent"),
        ({"rules": [{**rule(), "id": f"r{n}"} for n in range(33)]}, "too_many_rules", "at most 32"),
        ({"rules": [rule()], "params": ["not", "an", "object"]}, "invalid_params", "JSON object"),
        ({"rules": [rule()], "params": {"big": "x" * 17000}}, "invalid_params", "at most"),
    ]
    for n, (document, code, said) in enumerate(refusals):
        path = tmp_path / f"rules{n}.json"
        path.write_text(json.dumps(document))
        for verb in ("set", "test"):
            line = await cli.refused("webhook", "rules", verb, hook.id, str(path), code=code)
            assert said in line, (document, line)

    # Files that are no rule set at all.
    bad_json = tmp_path / "bad.json"
    bad_json.write_text('{"rules": [')
    assert "not valid JSON" in await cli.refused(
        "webhook", "rules", "set", hook.id, str(bad_json), code="invalid_rule"
    )
    not_utf8 = tmp_path / "latin1.json"
    not_utf8.write_bytes('{"rules": [], "params": {"x": "é"}}'.encode("latin-1"))
    assert "UTF-8" in await cli.refused(
        "webhook", "rules", "set", hook.id, str(not_utf8), code="invalid_rule"
    )
    empty = tmp_path / "empty.json"
    empty.write_text("  \n")
    assert "empty" in await cli.refused("webhook", "rules", "test", hook.id, str(empty), code="invalid_rule")
    huge = tmp_path / "huge.json"
    huge.write_bytes(b" " * (1024 * 1024 + 1))
    assert "larger" in await cli.refused("webhook", "rules", "set", hook.id, str(huge), code="invalid_rule")
    await cli.refused("webhook", "rules", "set", hook.id, "-", input="{", code="invalid_rule")
    missing = str(tmp_path / "missing.json")
    assert "cannot read" in await cli.refused(
        "webhook", "rules", "set", hook.id, missing, code="invalid_argument"
    )
    await cli.refused("webhook", "rules", "test", hook.id, str(tmp_path), code="invalid_argument")
    await cli.refused("webhook", "rules", "set", hook.id, code="usage", exit_code=2)

    good = tmp_path / "good.json"
    good.write_text(json.dumps({"rules": [rule()]}))
    await cli.refused("webhook", "rules", "set", "wh_nope", str(good), code="not_found")
    await cli.refused("webhook", "rules", "show", "wh_nope", code="not_found")
    assert (await cli.ok("webhook", "rules", "show", hook.id))["active"] is False  # nothing saved


# ---------------------------------------------------------------------------------------------
# quarantine


async def test_quarantined_github_deliveries_listed_released_and_discarded(served_cli: Cli) -> None:
    cli = served_cli
    await _ada(cli)
    hook = await _github(cli, "--trust", "octocat")
    for name in (COMMENT, REVIEW, COMMENT):
        assert (await hook.deliver(name))["disposition"] == "quarantined"
    assert (await hook.deliver(COMMENT, sender="OctoCat"))["disposition"] == "routed"  # any case

    held = (await cli.ok("quarantine", "list"))["todos"]
    assert len(held) == 3
    assert [row["id"] for row in held] == sorted((row["id"] for row in held), reverse=True)  # newest first
    for row in held:
        assert (row["webhook"], row["endpoint"], row["reason"], row["state"]) == (
            hook.id,
            "ada-agent",
            "untrusted_actor",
            "held",
        )
        assert row["actor"]["trusted"] is False and row["actor"]["sender"] == "Codertocat"
        assert row["expires_at"] and row["title"]
    newest, middle, oldest = (row["id"] for row in held)
    assert held[1]["event"] == "pull_request_review.submitted"

    # Paged like every list: the cursors, and the option that shows the next page.
    first = await cli.ok("quarantine", "list", "--webhook", hook.id, "--limit", "2")
    assert [row["id"] for row in first["todos"]] == [newest, middle]
    assert first["next_before"] == middle and first["next_after"] is None
    second = await cli.ok("quarantine", "list", "--before", middle)
    assert [row["id"] for row in second["todos"]] == [oldest] and second["next_after"] == oldest
    text = await cli.text("quarantine", "list", "--limit", "2")
    assert f"older: --before {middle}" in text
    assert "untrusted_actor: sender Codertocat is not a trusted GitHub login" in text
    assert "github:pull_request_review.submitted" in text
    await cli.refused("quarantine", "list", "--webhook", "wh_nope", code="not_found")
    await cli.refused("quarantine", "list", "--before", "nope", code="invalid_argument")

    assert (await cli.ok("webhook", "show", hook.id))["webhook"]["quarantined"] == 3
    assert (await cli.ok("webhook", "list"))["webhooks"][0]["quarantined"] == 3
    assert "quarantined: 3 (`switchboard quarantine list" in await cli.text("webhook", "show", hook.id)

    # Trust and release: the sender joins the trusted logins, and routing makes a normal todo.
    released = await cli.ok("quarantine", "release", oldest, "--trust")
    assert released["trusted"] == ["Codertocat"] and released["outcome"] == "routed"
    assert released["todo"]["state"] == "cancelled" and released["event"]["action"] == "trust_release"
    (made,) = released["todos"]
    assert (made["endpoint"], made["queue"]) == ("ada-agent", "default")
    assert (await cli.ok("webhook", "trust", hook.id))["trust"]["logins"] == ["Codertocat", "octocat"]
    todo = (await cli.ok("todo", "show", made["id"]))["todo"]
    assert todo["state"] == "pending" and todo["queue"] == "default"
    # `todo show` says how intake placed a todo and why a held one was held.
    assert todo["routing"]["by"] == "release" and todo["hold"] is None
    assert "routing:  release: released from quarantine by cli" in await cli.text("todo", "show", made["id"])
    was_held = (await cli.ok("todo", "show", oldest))["todo"]
    assert was_held["state"] == "cancelled" and was_held["hold"]["reason"] == "untrusted_actor"
    assert was_held["hold"]["actor"]["sender"] == "Codertocat" and was_held["hold"]["expires_at"]
    assert "held:     untrusted_actor: sender Codertocat is not a trusted GitHub login" in await cli.text(
        "todo", "show", oldest
    )

    # Discard with a reason, kept in its history.
    discarded = await cli.ok("quarantine", "discard", newest, "--reason", "spam from a stranger")
    assert discarded["todo"]["state"] == "cancelled"
    assert (discarded["event"]["action"], discarded["event"]["detail"]) == ("discard", "spam from a stranger")
    assert discarded["event"]["actor"].startswith("cli")

    # To a named queue of the endpoint's grant, in text.
    await cli.refused("quarantine", "release", middle, "--queue", "ci", code="not_granted")
    out = await cli.text("quarantine", "release", middle, "--queue", "reviews")
    assert f"todo {middle} released: made td_" in out and "on ada-agent/reviews" in out

    # Each is decided once; nothing is left held.
    for todo_id in (oldest, newest, middle):
        await cli.refused("quarantine", "release", todo_id, code="conflict")
        await cli.refused("quarantine", "discard", todo_id, "--reason", "again", code="conflict")
    assert (await cli.ok("quarantine", "list"))["todos"] == []
    assert "nothing is quarantined" in await cli.text("quarantine", "list")
    assert (await cli.ok("webhook", "show", hook.id))["webhook"]["quarantined"] == 0

    await cli.refused("quarantine", "release", "td_nope", code="not_found")
    await cli.refused("quarantine", "discard", "td_nope", "--reason", "x", code="not_found")
    await cli.refused("quarantine", "discard", newest, code="usage", exit_code=2)


async def test_discard_needs_a_real_reason_and_release_text_says_what_happened(served_cli: Cli) -> None:
    cli = served_cli
    await _ada(cli)
    hook = await _github(cli, "--trust", "octocat")
    await hook.deliver(COMMENT)
    await hook.deliver(COMMENT)
    first, second = (row["id"] for row in (await cli.ok("quarantine", "list"))["todos"])

    await cli.refused("quarantine", "discard", first, "--reason", "   ", code="invalid_argument")
    await cli.refused("quarantine", "discard", first, "--reason", "x" * 501, code="invalid_argument")
    out = await cli.text("quarantine", "discard", first, "--reason", "not  ours")
    assert out == f"todo {first} discarded: not ours\n"

    out = await cli.text("quarantine", "release", second, "--trust")
    assert f"webhook {hook.id} now trusts Codertocat" in out
    assert f"todo {second} released: made td_" in out and "on ada-agent/default" in out
    assert "why: released from quarantine by cli" in out
