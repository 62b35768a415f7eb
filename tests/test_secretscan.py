"""Secret scanning: every rule catches a real-shaped token and passes over its near misses, in the
raw text and in every view of it (a token hidden by invisible characters, entities, comments,
splits, escapes or base64 is still found), without refusing ordinary replies.

Samples are built at run time from a seeded generator, so no real-looking token sits in the repo.
"""

from __future__ import annotations

import base64
import json
import logging
import random
import re
import string
import time
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import func, select

from switchboard import reply, secretscan
from switchboard.connections import create_connection
from switchboard.errors import SwitchboardError
from switchboard.ids import new_id, new_token
from switchboard.models import Reply
from switchboard.secretscan import Rule
from switchboard.testing import FakeProvider, claimed_todo, human_and_endpoint, slack_address

_rng = random.Random(20260922)
ALNUM = string.ascii_letters + string.digits


def rnd(n: int, alphabet: str = ALNUM) -> str:
    return "".join(_rng.choice(alphabet) for _ in range(n))


def digits(n: int) -> str:
    return rnd(n, string.digits)


def pem(label: str) -> str:
    body = base64.b64encode(bytes(_rng.getrandbits(8) for _ in range(300))).decode()
    lines = "\n".join(body[i : i + 64] for i in range(0, len(body), 64))
    return f"-----BEGIN {label}-----\n{lines}\n-----END {label}-----"


AWS = string.ascii_uppercase + "234567"
URLSAFE = ALNUM + "_-"

TRUE_POSITIVES = {
    "github-pat": ["gh" + "p_" + rnd(36)],
    "github-oauth": ["gh" + "o_" + rnd(36)],
    "github-app-token": ["gh" + "u_" + rnd(36), "gh" + "s_" + rnd(36)],
    "github-refresh-token": ["gh" + "r_" + rnd(36)],
    "github-fine-grained-pat": ["github" + "_pat_" + rnd(22) + "_" + rnd(59)],
    "gitlab-pat": ["gl" + "pat-" + rnd(20)],
    "slack-bot-token": ["xo" + "xb-" + digits(12) + "-" + digits(13) + "-" + rnd(24)],
    "slack-user-token": ["xo" + "xp-" + "-".join(digits(12) for _ in range(3)) + "-" + rnd(32)],
    "slack-app-token": [
        "xa"
        + "pp-1-A"
        + rnd(10, string.ascii_uppercase + string.digits)
        + "-"
        + digits(13)
        + "-"
        + rnd(64, "0123456789abcdef")
    ],
    "slack-webhook-url": [
        "https://hooks.slack" + ".com/services/T" + rnd(8, AWS) + "/B" + rnd(8, AWS) + "/" + rnd(24)
    ],
    "aws-access-token": ["AK" + "IA" + rnd(16, AWS), "AS" + "IA" + rnd(16, AWS)],
    "stripe-access-token": ["sk" + "_live_" + rnd(24), "rk" + "_test_" + rnd(24)],
    "openai-api-key": [
        "sk-" + "proj-" + rnd(74, URLSAFE) + "T3Blbk" + "FJ" + rnd(74, URLSAFE),
        "sk-" + rnd(20) + "T3Blbk" + "FJ" + rnd(20),
    ],
    "anthropic-api-key": ["sk-" + "ant-api03-" + rnd(93, URLSAFE) + "AA"],
    "anthropic-admin-api-key": ["sk-" + "ant-admin01-" + rnd(93, URLSAFE) + "AA"],
    "private-key": [pem("RSA PRIVATE " + "KEY"), pem("OPENSSH PRIVATE " + "KEY"), pem("PRIVATE " + "KEY")],
    "switchboard-token": [new_token("sbk"), new_token("sbo"), new_token("whsec", 24)],
}

FALSE_POSITIVES = {
    "github-pat": ["gh" + "p_" + rnd(35), "gh" + "p_" + "a" * 36, "x" + "gh" + "p_" + rnd(36), "ghp_ tokens"],
    "github-oauth": ["gh" + "o_" + rnd(20)],
    "github-app-token": ["gh" + "x_" + rnd(36)],
    "github-refresh-token": ["gh" + "r_" + rnd(37)],
    "github-fine-grained-pat": ["github" + "_pat_" + rnd(40)],
    "gitlab-pat": ["gl" + "pat-" + rnd(10), "see the glpat- prefix docs"],
    "slack-bot-token": ["xo" + "xb-not-a-token", "xo" + "xb-123-456"],
    "slack-user-token": ["xo" + "xp-" + digits(12)],
    "slack-app-token": ["xa" + "pp-1-short"],
    "slack-webhook-url": ["https://hooks.slack" + ".com/services/", "hooks.slack.com/services/T000/B000/XXX"],
    "aws-access-token": [
        "AK" + "IA" + rnd(16, string.ascii_lowercase),
        "AKIAEXAMPLE",
        "AK" + "IA" + "A" * 16,
    ],
    "stripe-access-token": ["sk" + "_live_" + "abc", "pk" + "_live_" + rnd(24)],
    "openai-api-key": ["sk-" + rnd(48), "use sk-learn for this"],
    "anthropic-api-key": ["sk-" + "ant-api03-short", "sk-" + "ant-api03-" + rnd(93, URLSAFE) + "BB"],
    "anthropic-admin-api-key": ["sk-" + "ant-admin01-" + rnd(20)],
    "private-key": [
        pem("PUBLIC " + "KEY"),
        "-----BEGIN PRIVATE " + "KEY-----\n-----END PRIVATE " + "KEY-----",
        pem("CERTIFICATE"),
    ],
    "switchboard-token": [
        "sb" + "k_" + rnd(42, URLSAFE),
        "sb" + "k_" + rnd(44, URLSAFE),
        "sb" + "k_" + "a" * 43,
        # Ids are not tokens.
        new_id("wh"),
        new_id("ep"),
        "the sbk_ and whsec_ prefixes",
    ],
}


def test_every_rule_has_samples() -> None:
    ids = {rule.id for rule in secretscan.RULES}
    assert ids == set(TRUE_POSITIVES) == set(FALSE_POSITIVES)


@pytest.mark.parametrize(
    ("rule_id", "sample"), [(r, s) for r, samples in TRUE_POSITIVES.items() for s in samples]
)
def test_true_positive(rule_id: str, sample: str) -> None:
    for text in (sample, f"Deployed. The token is `{sample}`, rotate it.", f'key = "{sample}"\n'):
        found = secretscan.scan(text)
        assert found is not None and found.id == rule_id


@pytest.mark.parametrize(
    ("rule_id", "sample"), [(r, s) for r, samples in FALSE_POSITIVES.items() for s in samples]
)
def test_false_positive(rule_id: str, sample: str) -> None:
    assert secretscan.scan(f"Looked into it: {sample} is fine.") is None


def test_ordinary_replies_pass() -> None:
    prose = (
        "Fixed the race in `claim_next` (see #7). The ghp_ prefix check, the AKIA docs and sk-learn are "
        'unrelated. Stack trace:\n```\nTraceback (most recent call last):\n  File "x.py", line 3\n```\n'
        "Commit 3f2a9c1d4e5b6a7980c1d2e3f4a5b6c7d8e9f0a1, UUID 123e4567-e89b-12d3-a456-426614174000."
    )
    assert secretscan.scan(prose) is None


def test_entropy() -> None:
    assert secretscan.shannon_entropy("") == 0.0
    assert secretscan.shannon_entropy("aaaa") == 0.0
    assert secretscan.shannon_entropy("abcd") == 2.0


def test_a_key_after_a_too_short_block_is_still_found() -> None:
    short = "-----BEGIN PRIVATE " + "KEY-----\nabc\n-----END PRIVATE " + "KEY-----"
    found = secretscan.scan(short + "\n" + TRUE_POSITIVES["private-key"][0])
    assert found is not None and found.id == "private-key"


# ---------------------------------------------------------------------------------------------
# Bypasses (issue 13, item 6): a token hidden from the raw text is still one to whoever reads the
# rendered comment, so each of these is refused with the token's own rule.

TOKEN = "gh" + "p_" + rnd(36)


def _middle(token: str, sep: str) -> str:
    return token[:20] + sep + token[20:]


def _every(token: str, n: int, sep: str) -> str:
    return sep.join(token[i : i + n] for i in range(0, len(token), n))


def _fullwidth(text: str) -> str:
    return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in text)


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _wrap(text: str, width: int) -> str:
    return "\n".join(text[i : i + width] for i in range(0, len(text), width))


BYPASSES: dict[str, Callable[[str], str]] = {
    "zero-width space": lambda t: _middle(t, "\u200b"),
    "zero-width non-joiner": lambda t: _middle(t, "\u200c"),
    "zero-width joiner": lambda t: _middle(t, "\u200d"),
    "word joiner": lambda t: _middle(t, "\u2060"),
    "zero-width characters throughout": lambda t: _every(t, 3, "\u200b"),
    "zero-width inside the prefix": lambda t: t[:2] + "\u200b" + t[2:],
    "soft hyphen": lambda t: _middle(t, "\u00ad"),
    "soft hyphens throughout": lambda t: _every(t, 5, "\u00ad"),
    "BOM inside": lambda t: _middle(t, "\ufeff"),
    "bidi mark": lambda t: _middle(t, "\u200e"),
    "decimal entity": lambda t: t.replace("_", "&#95;"),
    "hex entity": lambda t: t.replace("_", "&#x5F;"),
    "named entity": lambda t: t.replace("_", "&lowbar;"),
    "every character an entity": lambda t: "".join(f"&#{ord(c)};" for c in t),
    "HTML comment": lambda t: _middle(t, "<!-- -->"),
    "HTML comment in the prefix": lambda t: t[:2] + "<!---->" + t[2:],
    "HTML comment, entity-escaped underscore": lambda t: _middle(t.replace("_", "&#95;"), "<!-- x -->"),
    "HTML tag": lambda t: _middle(t, "<b>") + "</b>",
    "entity inside a link": lambda t: f'<a href="https://example.com/?t={t.replace("_", "&#95;")}">build</a>',
    "wbr tag": lambda t: _middle(t, "<wbr>"),
    "Markdown emphasis": lambda t: _middle(t, "**") + "**",
    "code spans": lambda t: "`" + _middle(t, "``") + "`",
    "fullwidth forms": _fullwidth,
    "fullwidth prefix only": lambda t: _fullwidth(t[:4]) + t[4:],
    "line split": lambda t: _middle(t, "\n"),
    "CRLF split": lambda t: _middle(t, "\r\n"),
    "wrapped over lines": lambda t: _every(t, 8, "\n"),
    "space split": lambda t: _middle(t, " "),
    "spaces throughout, prose after": lambda t: _every(t, 4, " ") + " is the token I used",
    "split after the prefix": lambda t: t[:4] + " " + t[4:],
    "split inside the prefix": lambda t: t[:2] + " " + t[2:],
    "no-break space": lambda t: _middle(t, "\u00a0"),
    "hair space": lambda t: _middle(t, "\u200a"),
    "ideographic space": lambda t: _middle(t, "\u3000"),
    "base64": _b64,
    "base64 in a sentence": lambda t: f"The config is {_b64('GITHUB_TOKEN=' + t + chr(10))} (base64).",
    "base64, URL-safe and unpadded": lambda t: (
        base64.urlsafe_b64encode(f"t={t}".encode()).decode().strip("=")
    ),
    "base64 wrapped at 76": lambda t: _wrap(_b64("# env file\n" * 6 + "TOKEN=" + t + "\n"), 76),
    "JSON \\u escape": lambda t: t.replace("_", "\\u005f"),
    "JSON \\u escapes throughout": lambda t: "".join(f"\\u{ord(c):04x}" for c in t),
    "JSON \\u escape of a fullwidth letter": lambda t: "\\uff47" + t[1:],
    "\\x escape": lambda t: t.replace("_", "\\x5f"),
    "x_ prefix": lambda t: "x_" + t,
    "identifier prefix": lambda t: "GITHUB_TOKEN=MY_" + t,
    "double-underscore prefix": lambda t: "x__" + t,
    "combined: entity, zero-width, line split": lambda t: _middle(t.replace("_", "&#95;"), "\u200b\n"),
}


@pytest.mark.parametrize("name", list(BYPASSES))
def test_a_hidden_token_is_found(name: str) -> None:
    text = BYPASSES[name](TOKEN)
    # Only an identifier before it leaves the token itself in the raw text.
    assert (TOKEN in text) == (name in ("x_ prefix", "identifier prefix", "double-underscore prefix"))
    for wrapped in (text, f"Done, I used {text} to push.\n\nThanks!"):
        found = secretscan.scan(wrapped)
        assert found is not None and found.id == "github-pat", name


EVERY_RULE_BYPASSES = ("zero-width space", "fullwidth forms", "space split", "base64", "x_ prefix")


@pytest.mark.parametrize(
    ("rule_id", "sample", "bypass"),
    [
        (r, s, b)
        for r, samples in TRUE_POSITIVES.items()
        if r != "private-key"
        for s in samples
        for b in EVERY_RULE_BYPASSES
    ],
)
def test_every_rule_sees_through_the_bypasses(rule_id: str, sample: str, bypass: str) -> None:
    found = secretscan.scan(BYPASSES[bypass](sample))
    assert found is not None and found.id == rule_id


def test_a_slack_webhook_url_with_json_escaped_slashes() -> None:
    (url,) = TRUE_POSITIVES["slack-webhook-url"]
    found = secretscan.scan(json.dumps({"text": url}).replace("/", "\\/"))
    assert found is not None and found.id == "slack-webhook-url"


# ---------------------------------------------------------------------------------------------
# The refusal through the reply verb names the rule, never the token or a piece of it.


async def test_every_bypass_is_refused_by_reply_without_the_token(
    services: Any, db: Any, guarded: Any, fake_slack: FakeProvider, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    owner, endpoint = await human_and_endpoint(db)
    await create_connection(
        services, owner, kind="slack", name="slack", account_key="T0TEST", secret="xoxb-" + "test-" + "Yk3"
    )
    todo = await claimed_todo(db, endpoint, slack_address())
    fragments = {TOKEN[i : i + 10] for i in range(len(TOKEN) - 9)}
    for name, bypass in BYPASSES.items():
        with pytest.raises(SwitchboardError) as raised:
            await reply.send_reply(services, endpoint, todo.id, f"Done: {bypass(TOKEN)}")
        refusal = raised.value.as_dict()
        assert refusal["error"] == "secret_detected" and refusal["rule"] == "github-pat", name
        assert not any(fragment in str(refusal) for fragment in fragments), name
    assert not any(fragment in caplog.text for fragment in fragments)
    assert services.metrics.value("switchboard_secret_blocks_total", rule="github-pat") == len(BYPASSES)
    assert fake_slack.requests == []
    async with db.read() as s:
        assert (await s.scalar(select(func.count()).select_from(Reply))) == 0


# ---------------------------------------------------------------------------------------------
# Where an underscore joins an identifier to a prefix. A prefix with a long random body never occurs
# inside an ordinary identifier, so `x_ghp_…` is a token; the Stripe prefix and a body can be spelled
# with words (`use_sk_test_placeholder`), so after an identifier only a generated-looking body counts.

STRIPE_BODY = rnd(9) + "7" + rnd(14)  # with a digit, as generated keys nearly always are

IDENTIFIER_CASES = {
    "x_" + TOKEN: "github-pat",
    "MY_" + TOKEN: "github-pat",
    "const API_" + TOKEN + " = 1": "github-pat",
    "x_" + "sk" + "_live_" + STRIPE_BODY: "stripe-access-token",
    "use_" + "sk" + "_test_" + STRIPE_BODY: "stripe-access-token",
    "_" + "sk" + "_live_" + STRIPE_BODY + "_": "stripe-access-token",  # Markdown italics
    "set use_sk_test_placeholder in conftest": None,
    "my_sk_live_configuration_loader and rk_prod_": None,
    "self.use_sk_test_placeholderValue = True": None,
    "x" + TOKEN: None,  # glued to a letter: not a token
    "x" + "sk" + "_live_" + STRIPE_BODY: None,
}


@pytest.mark.parametrize(("text", "rule_id"), list(IDENTIFIER_CASES.items()))
def test_an_underscore_before_a_prefix(text: str, rule_id: str | None) -> None:
    found = secretscan.scan(text)
    assert (found.id if found else None) == rule_id


# ---------------------------------------------------------------------------------------------
# The new views do not refuse normal replies.

_HARMLESS_B64 = _b64("The deploy finished at 12:04 and every check passed. Nothing to rotate.\n" * 3)

ORDINARY_REPLIES = {
    "prose": (
        "I looked into the flaky test. The race is in `claim_next`: two workers read the same row "
        "before either writes. The fix takes the row lock first; I ran the suite 50 times. "
        "See #7 and #12 — and thanks for the clear report!"
    ),
    "prose about token prefixes": (
        "ghp_ tokens are classic personal access tokens and they expire, github_pat_ ones are "
        "fine-grained. glpat- tokens are GitLab's. AKIA KEYS ARE PUBLIC IDS and sk_live_ keys "
        "start with that prefix. xoxb- bot tokens too."
    ),
    # Each joins after the prefix to exactly a token's length, with a digit in it.
    "prose with numbers after a prefix": (
        "ghp_ tokens expire after 90 days unless renewed by an admin.\n"
        "ghp_ Tokens Expire After 90 Days Unless Renewed\n"
        "glpat- tokens last 365 days now.\n"
        "sk_live_ keys rotate every 30 days here\n"
        "AKIA EAST REGION 3 TEAMS\n"
    ),
    "prose with entities, comments and tags": (
        "Tom &amp; Jerry said 3 &lt; 4 &mdash; <!-- note to self --> ok. <b>Bold</b> and <i>it</i>, "
        "a <br> break, a <wbr>long<wbr>word, and `code` spans with **emphasis**."
    ),
    "typography": (
        "Stra\u00dfe, caf\u00e9, na\u00efve co\u00f6perate; \u201cquotes\u201d \u2014 dashes "
        "\u2013 and hy\u00adphen\u00adated words; \ufb01ne ligatures; \u00bd and x\u00b2; "
        "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\uff08\u5168\u89d2\uff09; "
        "emoji \U0001f469\u200d\U0001f4bb \U0001f44d\U0001f3fd; 10\u00a0000\u202fkm."
    ),
    "code block": (
        "```python\n"
        "def scan(text: str, extra_rules: Iterable[Rule] = ()) -> Rule | None:\n"
        '    escaped = "caf\\u00e9 \\x41\\n\\t"  # \\u escapes in a literal\n'
        '    pattern = re.compile(r"(?<![A-Za-z0-9])ghp_[0-9A-Za-z]{36}")\n'
        "    return a*b + c**2 if use_sk_test_placeholder else None\n"
        "```\n"
        '```json\n{"name": "caf\\u00e9", "path": "a\\/b", "data": "SGVsbG8sIFdvcmxkIQ=="}\n```'
    ),
    "URLs": (
        "https://github.com/acme/api/pull/7/files#diff-3f2a9c1d4e5b6a7980c1d2e3f4a5b6c7 and "
        "https://example.com/search?q=rate%20limit&page=2&sort=desc%2Casc, "
        "https://hooks.slack.com/services/ is the docs path, "
        "https://en.wikipedia.org/wiki/Caf%C3%A9 and <https://example.com/a_b_c?x=1&amp;y=2>."
    ),
    "git SHAs": (
        "Reverted 3f2a9c1d4e5b6a7980c1d2e3f4a5b6c7d8e9f0a1 and 9E107D9D372BB6826BD81D3542A419D6E277D4D6; "
        "short SHAs 3f2a9c1 and a94a8fe5; tree 0123456789abcdef0123456789abcdef01234567."
    ),
    "UUIDs": (
        "Run 123e4567-e89b-12d3-a456-426614174000 and 550E8400-E29B-41D4-A716-446655440000 failed; "
        "request id 6ba7b8109dad11d180b400c04fd430c8."
    ),
    "base64 of harmless text": f"The payload was {_HARMLESS_B64} and decodes to a status line.",
    "base64 of harmless text, wrapped": "\n".join(
        _HARMLESS_B64[i : i + 76] for i in range(0, len(_HARMLESS_B64), 76)
    ),
    "a harmless JWT header and long identifiers": (
        "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9 is only a header. TestSecretScanBypassesAreRefused, "
        "test_a_token_in_a_code_fence_url_or_escape_is_caught, AbstractSingletonProxyFactoryBean."
    ),
    "a stack trace": (
        "Traceback (most recent call last):\n"
        '  File "/srv/app/switchboard/reply.py", line 241, in send_reply\n'
        "    rule = secretscan.scan(body)\n"
        "KeyError: 'x'\n"
    ),
}


@pytest.mark.parametrize("name", list(ORDINARY_REPLIES))
def test_ordinary_replies_still_pass(name: str) -> None:
    assert secretscan.scan(ORDINARY_REPLIES[name]) is None


@pytest.mark.parametrize(
    ("rule_id", "sample", "bypass"),
    [
        (r, s, b)
        for r, samples in FALSE_POSITIVES.items()
        for s in samples
        for b in ("zero-width space", "fullwidth forms", "space split", "base64")
    ],
)
def test_near_misses_stay_near_misses_in_every_view(rule_id: str, sample: str, bypass: str) -> None:
    assert secretscan.scan(f"Looked into it: {BYPASSES[bypass](sample)} is fine.") is None


# ---------------------------------------------------------------------------------------------
# Rules are data: a plugin will bring its own, checked through the same views.

ACME = Rule(
    "acme-key",
    re.compile(r"(?<![A-Za-z0-9])acme_[0-9a-f]{32}(?![A-Za-z0-9])"),
    "Acme API key",
    min_entropy=3.0,
    prefixes=("acme_",),
)


def test_extra_rules_extend_the_core_set() -> None:
    key = "acme_" + rnd(32, "0123456789abcdef")
    assert secretscan.scan(f"use {key}") is None
    for text in (key, _middle(key, "\u200b"), _middle(key, " "), _b64(key), "x_" + key):
        found = secretscan.scan(text, extra_rules=[ACME])
        assert found is ACME, text
    # The core rules still apply next to extra ones.
    found = secretscan.scan(TOKEN, extra_rules=[ACME])
    assert found is not None and found.id == "github-pat"


def test_scan_rules_uses_exactly_the_rules_given() -> None:
    assert secretscan.scan_rules(TOKEN, []) is None
    assert secretscan.scan_rules(TOKEN) is secretscan.RULES[0]
    block = Rule("demo-block", re.compile(r"BEGIN DEMO"), end=re.compile(r"END DEMO"), min_body=8)
    assert secretscan.scan_rules("BEGIN DEMO 12345678 END DEMO", [block]) is block
    assert secretscan.scan_rules("BEGIN DEMO 1234 END DEMO", [block]) is None


# ---------------------------------------------------------------------------------------------
# Bounded work on hostile text.


def test_base64_decoding_is_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    decode = secretscan._decode_base64

    def counting(run: str) -> str | None:
        calls.append(run)
        return decode(run)

    monkeypatch.setattr(secretscan, "_decode_base64", counting)
    runs = " ".join(_b64(f"harmless line number {i:04d}") for i in range(400))
    assert secretscan.scan(runs[: 16 * 1024]) is None
    assert 0 < len(calls) <= secretscan.MAX_BASE64_RUNS


HOSTILE = [
    ("gh" + "p_ ") * 6000,
    ("g h p _ 1 ") * 2000,
    "sk- " * 6000,
    "AKIA " * 4000,
    "&#95;" * 4000,
    "<!--" * 5000,
    "<!-->" * 4000,
    "<a " * 6000,
    ("<a " + "x" * 250) * 70,
    "\\u0067" * 3000,
    "\\ud800" * 3000,
    "\u200b" * 16384,
    "\uff47\uff48\uff50\uff3f" * 4000,
    "a*b" * 6000,
    "Abcdefghijklmnopqrstuvwx " * 700,
    "Abcdefghijklmnopqrstuvwx\n" * 700,
    "A" * 16384,
    _b64("gh" + "p_ 1 " * 2400),
    "%5Cu0067&#95;\u200b<!---->gh" + "p_ 7 " * 600,
]


@pytest.mark.parametrize(
    "hostile",
    [
        "-----BEGIN PRIVATE " + "KEY-----" * 600,
        ("-----BEGIN RSA PRIVATE " + "KEY-----\n-----END RSA PRIVATE " + "KEY-----\n") * 300,
        "gh" + "p_" * 8000,
        "xo" + "xb-1234567890-" * 1100,
        *HOSTILE,
    ],
)
def test_hostile_16_kib_texts_are_scanned_quickly(hostile: str) -> None:
    """No rule or view backtracks or decodes badly: the scan runs inside the reply transaction."""
    started = time.perf_counter()
    assert secretscan.scan(hostile[: 16 * 1024]) is None
    assert time.perf_counter() - started < 0.25


# Fragments that exercise every view, so generated text reaches the decoders and the joiner.
FRAGMENTS = [
    "gh" + "p_",
    "sk-",
    "sk" + "_live_",
    "AKIA",
    "glpat-",
    "xo" + "xb-",
    "hooks.slack.com/services/",
    "-----BEGIN PRIVATE " + "KEY-----",
    "-----END PRIVATE " + "KEY-----",
    "&#95;",
    "&#x",
    "&",
    ";",
    "<!--",
    "-->",
    "<b>",
    "</",
    "<",
    ">",
    "\\u005f",
    "\\ud83d",
    "\\u{",
    "\\x5",
    "\\/",
    "\\n",
    "%5F",
    "%",
    "\u200b",
    "\u00ad",
    "\ufeff",
    "\u00a0",
    "\u3000",
    "\uff47",
    "\U0001f469",
    " ",
    "\n",
    "\r\n",
    "*",
    "`",
    "_",
    "=",
    "==",
    "Zm9v",
    "Z2hwX",
    "QUJD",
    "A" * 8,
    "7",
    "x",
    rnd(12),
    rnd(36),
]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.text(max_size=600), st.lists(st.sampled_from(FRAGMENTS), max_size=300).map("".join)))
def test_any_text_scans_without_raising(text: str) -> None:
    found = secretscan.scan(text)
    assert found is None or found in secretscan.RULES


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(FRAGMENTS), min_size=1, max_size=40).map("".join), st.integers(1, 400))
def test_any_16_kib_repetition_scans_without_raising(unit: str, times: int) -> None:
    secretscan.scan((unit * times)[: 16 * 1024])


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=300), st.text(max_size=300))
def test_a_token_between_spaces_is_found_whatever_surrounds_it(before: str, after: str) -> None:
    found = secretscan.scan(f"{before} {TOKEN} {after}")
    assert found is not None


# ---------------------------------------------------------------------------------------------
# Where a pasted token really sits in a reply: a code fence, a URL, an escape sequence.

_wrap_rng = random.Random(20261130)


def _token() -> str:
    return "gh" + "p_" + "".join(_wrap_rng.choice(string.ascii_letters + string.digits) for _ in range(36))


@pytest.mark.parametrize(
    "wrap",
    [
        "```\n{t}\n```",
        "https://x-access-token:{t}@github.com/acme/api.git",
        "https://api.example.com/v1?token={t}&page=2",
        "curl 'https://api.example.com/?q=token%3D{t}'",
        "https://example.com/a%20{t}%0A",
        "italic _{t}_ in Markdown",
        "GITHUB_TOKEN={t}",
        'print("first line\\n{t}")',
        '{{"config": "a\\t{t}"}}',
    ],
)
def test_a_token_in_a_code_fence_url_or_escape_is_caught(wrap: str) -> None:
    found = secretscan.scan(wrap.format(t=_token()))
    assert found is not None and found.id == "github-pat"


def test_a_token_glued_to_letters_is_still_not_one() -> None:
    assert secretscan.scan("x" + _token()) is None
    assert secretscan.scan("100%25 done, the 50%20 rule, a\\nb") is None
    # An identifier of words is not a key; `MY_ghp_…` is a token (issue 13: tests/test_secretscan.py).
    assert secretscan.scan("set use_sk_test_placeholder") is None
