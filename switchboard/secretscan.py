"""High-confidence secret detection for reply text, in the spirit of gitleaks' default rules.

A public issue comment is the worst place for an agent to paste a token, so ``reply`` refuses text
that matches one of these rules. Only rules with a distinctive prefix or structure are kept (no
generic "key = <high entropy>" rule), so ordinary prose and code never trip them. A finding names
the rule id, never the matched text: the caller must not be able to read a secret back out of an
error.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from urllib.parse import unquote

# A token must not be glued to more letters or digits on either side ("xghp_…" is not a token).
# A lone underscore is a boundary, so Markdown italics (`_ghp_…_`) are caught; one that joins an
# identifier (`use_sk_test_placeholder`) is not.
_L = r"(?<![A-Za-z0-9])(?<![A-Za-z0-9]_)"
_R = r"(?![A-Za-z0-9])"


@dataclass(frozen=True)
class Rule:
    id: str
    description: str
    pattern: re.Pattern[str]
    # Minimum Shannon entropy (bits per character) of the secret group: gitleaks uses the same test
    # to pass over placeholders such as "ghp_xxxxxxxx…".
    min_entropy: float = 0.0
    # The regex group holding the secret itself (0: the whole match).
    group: int = 0


def _rule(rule_id: str, description: str, regex: str, min_entropy: float = 0.0, group: int = 0) -> Rule:
    return Rule(rule_id, description, re.compile(regex), min_entropy, group)


RULES: tuple[Rule, ...] = (
    _rule("github-pat", "GitHub personal access token", _L + r"ghp_[0-9A-Za-z]{36}" + _R, 3.0),
    _rule("github-oauth", "GitHub OAuth access token", _L + r"gho_[0-9A-Za-z]{36}" + _R, 3.0),
    _rule("github-app-token", "GitHub App token", _L + r"(?:ghu|ghs)_[0-9A-Za-z]{36}" + _R, 3.0),
    _rule("github-refresh-token", "GitHub refresh token", _L + r"ghr_[0-9A-Za-z]{36}" + _R, 3.0),
    _rule(
        "github-fine-grained-pat",
        "GitHub fine-grained personal access token",
        _L + r"github_pat_[0-9A-Za-z_]{82}" + _R,
        3.0,
    ),
    _rule("gitlab-pat", "GitLab personal access token", _L + r"glpat-[0-9A-Za-z_-]{20}" + _R, 3.0),
    _rule(
        "slack-bot-token",
        "Slack bot token",
        _L + r"xoxb-[0-9]{10,13}-[0-9]{10,13}(?:-[0-9A-Za-z]{8,64})+" + _R,
    ),
    _rule(
        "slack-user-token",
        "Slack user token",
        _L + r"xox[pe](?:-[0-9]{10,13}){3}-[0-9A-Za-z]{28,34}" + _R,
    ),
    _rule(
        "slack-app-token",
        "Slack app-level token",
        _L + r"(?i:xapp)-[0-9]-[A-Z0-9]+-[0-9]+-[a-z0-9]{32,}" + _R,
    ),
    _rule(
        "slack-webhook-url",
        "Slack incoming webhook URL",
        r"hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9+/]{43,56}",
    ),
    _rule(
        "aws-access-token",
        "AWS access key id",
        _L + r"(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z2-7]{16}" + _R,
        3.0,
    ),
    _rule(
        "stripe-access-token",
        "Stripe secret or restricted key",
        _L + r"(?:sk|rk)_(?:test|live|prod)_[0-9A-Za-z]{10,99}" + _R,
        2.0,
    ),
    _rule(
        "openai-api-key",
        "OpenAI API key",
        _L
        + r"sk-(?:(?:proj|svcacct|admin)-(?:[A-Za-z0-9_-]{74}|[A-Za-z0-9_-]{58})T3BlbkFJ"
        + r"(?:[A-Za-z0-9_-]{74}|[A-Za-z0-9_-]{58})|[A-Za-z0-9]{20}T3BlbkFJ[A-Za-z0-9]{20})"
        + _R,
    ),
    _rule("anthropic-api-key", "Anthropic API key", _L + r"sk-ant-api03-[A-Za-z0-9_-]{93}AA" + _R),
    _rule("anthropic-admin-api-key", "Anthropic admin key", _L + r"sk-ant-admin01-[A-Za-z0-9_-]{93}AA" + _R),
    # Matched by _pem_blocks below: as one regex, a lazy body between BEGIN and END backtracks
    # quadratically over text full of unterminated headers.
    _rule("private-key", "PEM private key block", r"-----BEGIN[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----"),
)

_PEM_END = re.compile(r"-----END[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----")
_PEM_MIN_BODY = 64


def _pem_blocks(rule: Rule, text: str) -> bool:
    """A BEGIN header, a body of at least 64 characters, an END footer; one forward pass."""
    pos = 0
    while (begin := rule.pattern.search(text, pos)) is not None:
        end = _PEM_END.search(text, begin.end())
        if end is None:
            return False  # no footer anywhere after this header, so none after any later one
        if end.start() - begin.end() >= _PEM_MIN_BODY:
            return True
        pos = end.end()
    return False


def shannon_entropy(text: str) -> float:
    if not text:
        return 0.0
    counts = Counter(text)
    return -sum(n / len(text) * math.log2(n / len(text)) for n in counts.values())


# A backslash escape as written in a string literal or JSON (backslash, "n", then the token): its
# letter would otherwise glue onto the token that follows.
_ESCAPE = re.compile(r"\\[nrtfvb0]")


def _views(text: str) -> list[str]:
    """The text as written, and as a reader (or a browser) would decode it: percent-escapes of a
    URL undone (`?t=%3Dghp_…`, `%0Aghp_…`), backslash escapes turned into spaces."""
    views = [text]
    if "%" in text:
        decoded = unquote(text)
        if decoded != text:
            views.append(decoded)
    if "\\" in text:
        views.extend(v for v in (_ESCAPE.sub(" ", view) for view in list(views)) if v not in views)
    return views


def scan(text: str) -> Rule | None:
    """The first rule ``text`` matches, or None. Never returns or logs the match itself."""
    for view in _views(text):
        for rule in RULES:
            if rule.id == "private-key":
                if _pem_blocks(rule, view):
                    return rule
                continue
            for match in rule.pattern.finditer(view):
                if shannon_entropy(match.group(rule.group)) >= rule.min_entropy:
                    return rule
    return None
