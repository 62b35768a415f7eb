"""Secret scanning: every rule catches a real-shaped token and passes over its near misses.

Samples are built at run time from a seeded generator, so no real-looking token sits in the repo.
"""

from __future__ import annotations

import base64
import random
import string
import time

import pytest

from switchboard import secretscan

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


@pytest.mark.parametrize(
    "hostile",
    [
        "-----BEGIN PRIVATE " + "KEY-----" * 600,
        ("-----BEGIN RSA PRIVATE " + "KEY-----\n-----END RSA PRIVATE " + "KEY-----\n") * 300,
        "gh" + "p_" * 8000,
        "xo" + "xb-1234567890-" * 1100,
    ],
)
def test_hostile_16_kib_texts_are_scanned_quickly(hostile: str) -> None:
    """No rule backtracks badly: the scan runs inside the reply transaction."""
    started = time.perf_counter()
    secretscan.scan(hostile[: 16 * 1024])
    assert time.perf_counter() - started < 0.25
