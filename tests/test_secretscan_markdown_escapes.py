"""Markup that renders as a token in a reply: Markdown backslash escapes (``ghp\\_…``, ``glpat\\-…``;
CommonMark shows ``\\_`` as ``_``, and any ASCII punctuation the same way), and a link or image
whose text is the token's first part (``[ghp_abc](u)def`` reads ``ghp_abcdef`` in a GitHub, Gitea
or Linear comment, and so does Slack's ``<u|ghp_abc>def``). The scan read the backslashes and the
brackets literally, so ``reply`` posted the token."""

from __future__ import annotations

import logging
import random
import re
import string
from typing import Any

import pytest
from sqlalchemy import func, select

from switchboard import reply, secretscan
from switchboard.connections import create_connection
from switchboard.errors import SwitchboardError
from switchboard.ids import new_token
from switchboard.models import Reply
from switchboard.testing import FakeProvider, claimed_todo, human_and_endpoint, slack_address

_rng = random.Random(20261206)
ALNUM = string.ascii_letters + string.digits


def rnd(n: int, alphabet: str = ALNUM) -> str:
    return "".join(_rng.choice(alphabet) for _ in range(n))


TOKENS = {
    "github-pat": "gh" + "p_" + rnd(36),
    "github-fine-grained-pat": "github" + "_pat_" + rnd(22) + "_" + rnd(59),
    "gitlab-pat": "gl" + "pat-" + rnd(20),
    "slack-bot-token": "xo" + "xb-" + rnd(12, string.digits) + "-" + rnd(13, string.digits) + "-" + rnd(24),
    "stripe-access-token": "sk" + "_live_" + rnd(24),
    "switchboard-token": new_token("sbk"),
}


def escaped(token: str) -> str:
    """Every ASCII punctuation character backslash-escaped, as Markdown allows (it renders the same)."""
    return re.sub(r"([!-/:-@\[-`{-~])", r"\\\1", token)


@pytest.mark.parametrize("rule_id", list(TOKENS))
def test_a_markdown_escaped_token_is_found(rule_id: str) -> None:
    token = TOKENS[rule_id]
    text = escaped(token)
    assert token not in text
    for wrapped in (text, f"Done, I pushed with {text} as the token.\n\nThanks!"):
        found = secretscan.scan(wrapped)
        assert found is not None and found.id == rule_id, (rule_id, wrapped)


LINKED = {
    "link": lambda t: f"[{t[:12]}](https://example.com){t[12:]}",
    "image": lambda t: f"![{t[:12]}](x.png){t[12:]}",
    "link with a title": lambda t: f'[{t[:12]}](https://example.com "docs"){t[12:]}',
    "two links": lambda t: f"[{t[:8]}](a)[{t[8:20]}](b){t[20:]}",
    "reference link": lambda t: f"[{t[:12]}][1]{t[12:]}\n\n[1]: https://example.com",
    "escaped and linked": lambda t: f"[{escaped(t[:12])}](u){escaped(t[12:])}",
    "Slack link": lambda t: f"<https://example.com|{t[:12]}>{t[12:]}",
}


@pytest.mark.parametrize("name", list(LINKED))
def test_a_token_split_by_markdown_links_is_found(name: str) -> None:
    for rule_id in ("github-pat", "switchboard-token", "slack-bot-token"):
        token = TOKENS[rule_id]
        text = LINKED[name](token)
        assert token not in text
        found = secretscan.scan(f"See {text} for details.")
        assert found is not None and found.id == rule_id, (name, rule_id)


def test_a_token_in_a_markdown_link_address_is_still_found() -> None:
    token = TOKENS["github-pat"]
    for text in (
        f"The [build](https://ci.example.com/?t={token}) passed.",
        f"The <https://ci.example.com/?t={token}|build> passed.",
    ):
        found = secretscan.scan(text)
        assert found is not None and found.id == "github-pat", text


def test_ordinary_markdown_passes() -> None:
    text = (
        "Fixed in [#123](https://github.com/acme/api/pull/123), see ![diagram](docs/flow.png) and "
        "[the `sk_live_` prefix docs](https://stripe.com/docs/keys). "
        "Use `a\\_b`, C:\\path\\to and \\*not bold\\*."
    )
    assert secretscan.scan(text) is None


def test_an_escaped_backslash_is_not_an_escape() -> None:
    # `\\` renders one backslash, so the comment reads `ghp\_…`: no token.
    token = TOKENS["github-pat"]
    assert secretscan.scan(token.replace("_", "\\\\_")) is None
    assert secretscan.scan("Use `a\\_b` and C:\\path\\to\\file in prose.") is None


async def test_reply_refuses_a_markdown_escaped_token(
    services: Any, db: Any, guarded: Any, fake_slack: FakeProvider, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    owner, endpoint = await human_and_endpoint(db)
    await create_connection(
        services, owner, kind="slack", name="slack", account_key="T0TEST", secret="xoxb-" + "test-" + "Yk3"
    )
    todo = await claimed_todo(db, endpoint, slack_address())
    token = TOKENS["github-pat"]
    with pytest.raises(SwitchboardError) as raised:
        await reply.send_reply(services, endpoint, todo.id, f"Done: {escaped(token)}")
    refusal = raised.value.as_dict()
    assert refusal["error"] == "secret_detected" and refusal["rule"] == "github-pat", refusal
    assert token[4:20] not in str(refusal) and token[4:20] not in caplog.text
    assert fake_slack.requests == []
    async with db.read() as s:
        assert (await s.scalar(select(func.count()).select_from(Reply))) == 0
