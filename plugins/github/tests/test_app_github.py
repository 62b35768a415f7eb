"""The github provider inside a running Switchboard: the app, its database and the webhook come from
switchboard.testing's pytest plugin, so this runs from the plugin's own folder as from the repo's."""

from __future__ import annotations

from pathlib import Path

from switchboard.testing import Services, counts, github_headers, make_webhook, post, todo

FIXTURES = Path(__file__).parents[3] / "tests" / "fixtures" / "github"


async def test_a_signed_issue_becomes_a_todo_with_a_reply_address_and_a_forged_one_nothing(
    services: Services, base_url: str
) -> None:
    token, secret, _ = await make_webhook(services, "github")
    assert secret is not None
    body = (FIXTURES / "issues" / "opened.payload.json").read_bytes()

    status, refused, _ = await post(base_url, token, body, github_headers("whsec_forged", body, "issues"))
    assert (status, refused["error"]) == (401, "signature_invalid")
    assert await counts(services) == (0, 0)

    status, answer, _ = await post(base_url, token, body, github_headers(secret, body, "issues"))
    assert status == 202 and answer["created"] == 1, answer
    stored = await todo(services, answer["todos"][0]["id"])
    assert stored.source == "github" and stored.kind == "issues.opened"
    assert stored.reply_to is not None
    assert stored.reply_to["display"] == "github github.com/Codertocat/Hello-World#1"
