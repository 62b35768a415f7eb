"""High-confidence secret detection for reply text, in the spirit of gitleaks' default rules.

A public issue comment is the worst place for an agent to paste a token, so ``reply`` refuses text
that matches one of these rules. Only rules with a distinctive prefix or structure are kept (no
generic "key = <high entropy>" rule), so ordinary prose and code never trip them. A finding names
the rule id, never the matched text: the caller must not be able to read a secret back out of an
error.

A token hidden from the raw text is still a token to whoever reads the rendered comment, so the rules
also run over views of the text as it renders or decodes (``_views``): Unicode-normalised with
invisible characters removed, HTML entities, comments and tags undone, escapes, Markdown's
backslash escapes and percent-escapes decoded; over tokens split by spaces or lines
(``_split_tokens``); and over decoded base64 runs (``_base64_texts``). Every view is one linear
pass over at most the reply's 16 KiB, and base64 is decoded one level deep for at most
``MAX_BASE64_RUNS`` runs, so hostile text cannot make a scan slow.

Rules are data (``Rule``): ``RULES`` is the core set, and ``scan(text, extra_rules=…)`` adds more (the
way a plugin will bring its own).
"""

from __future__ import annotations

import base64
import binascii
import html
import importlib
import math
import re
import string
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import accumulate
from urllib.parse import unquote

# A token must not be glued to more letters or digits on either side ("xghp_…" is not a token).
# An underscore is a boundary, even one that joins an identifier: `MY_ghp_…`, `x_ghp_…` and Markdown
# italics (`_ghp_…_`) are where pasted tokens sit, and a fixed prefix with a long random body never
# occurs inside an ordinary identifier. Identifiers were once exempt wholesale, to pass over
# `use_sk_test_placeholder`; only the Stripe rule can be spelled with words like that, so only it
# (``wordlike``) asks a match joined to an identifier to look generated (see ``_matches``).
_L = r"(?<![A-Za-z0-9])"
_R = r"(?![A-Za-z0-9])"


@dataclass(frozen=True)
class Rule:
    """One kind of secret; a finding names ``id``, never the match."""

    id: str
    pattern: re.Pattern[str]
    description: str = ""
    # Minimum Shannon entropy (bits per character) of the secret group: gitleaks uses the same test
    # to pass over placeholders such as "ghp_xxxxxxxx…".
    min_entropy: float = 0.0
    # The regex group holding the secret itself (0: the whole match).
    group: int = 0
    # The literal starts of a token ("ghp_"), where ``_split_tokens`` looks for a token broken by
    # spaces or lines. A rule without prefixes is matched on unbroken text only.
    prefixes: tuple[str, ...] = ()
    # The prefix and a body can be ordinary words, as in the identifier `use_sk_test_placeholder`:
    # when an identifier is joined to the match by an underscore, it counts only if the secret looks
    # generated (``_looks_generated``). A random key (`x_sk_live_4eC3…`) still counts.
    wordlike: bool = False
    # A block rule: ``pattern`` is the header and ``end`` the footer, with at least ``min_body``
    # characters between them (PEM), matched in one forward pass by ``_blocks``.
    end: re.Pattern[str] | None = None
    min_body: int = 0


def _rule(
    rule_id: str,
    description: str,
    regex: str,
    min_entropy: float = 0.0,
    prefixes: tuple[str, ...] = (),
    wordlike: bool = False,
) -> Rule:
    return Rule(rule_id, re.compile(regex), description, min_entropy, prefixes=prefixes, wordlike=wordlike)


def _gh(rule_id: str, description: str, *kinds: str) -> Rule:
    alternatives = "|".join(kinds)
    return _rule(
        rule_id,
        description,
        _L + rf"(?:{alternatives})_[0-9A-Za-z]{{36}}" + _R,
        3.0,
        prefixes=tuple(kind + "_" for kind in kinds),
    )


_STRIPE_PREFIXES = tuple(f"{kind}_{mode}_" for kind in ("sk", "rk") for mode in ("test", "live", "prod"))

RULES: tuple[Rule, ...] = (
    _gh("github-pat", "GitHub personal access token", "ghp"),
    _gh("github-oauth", "GitHub OAuth access token", "gho"),
    _gh("github-app-token", "GitHub App token", "ghu", "ghs"),
    _gh("github-refresh-token", "GitHub refresh token", "ghr"),
    _rule(
        "github-fine-grained-pat",
        "GitHub fine-grained personal access token",
        _L + r"github_pat_[0-9A-Za-z_]{82}" + _R,
        3.0,
        prefixes=("github_pat_",),
    ),
    _rule(
        "gitlab-pat",
        "GitLab personal access token",
        _L + r"glpat-[0-9A-Za-z_-]{20}" + _R,
        3.0,
        prefixes=("glpat-",),
    ),
    _rule(
        "slack-bot-token",
        "Slack bot token",
        _L + r"xoxb-[0-9]{10,13}-[0-9]{10,13}(?:-[0-9A-Za-z]{8,64})+" + _R,
        prefixes=("xoxb-",),
    ),
    _rule(
        "slack-user-token",
        "Slack user token",
        _L + r"xox[pe](?:-[0-9]{10,13}){3}-[0-9A-Za-z]{28,34}" + _R,
        prefixes=("xoxp-", "xoxe-"),
    ),
    _rule(
        "slack-app-token",
        "Slack app-level token",
        _L + r"(?i:xapp)-[0-9]-[A-Z0-9]+-[0-9]+-[a-z0-9]{32,}" + _R,
        prefixes=("xapp-",),
    ),
    _rule(
        "slack-webhook-url",
        "Slack incoming webhook URL",
        r"hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9+/]{43,56}",
        prefixes=("hooks.slack.com/",),
    ),
    _rule(
        "aws-access-token",
        "AWS access key id",
        _L + r"(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z2-7]{16}" + _R,
        3.0,
        prefixes=("A3T", "AKIA", "ASIA", "ABIA", "ACCA"),
    ),
    _rule(
        "stripe-access-token",
        "Stripe secret or restricted key",
        _L + r"(?:sk|rk)_(?:test|live|prod)_[0-9A-Za-z]{10,99}" + _R,
        2.0,
        prefixes=_STRIPE_PREFIXES,
        wordlike=True,
    ),
    _rule(
        "openai-api-key",
        "OpenAI API key",
        _L
        + r"sk-(?:(?:proj|svcacct|admin)-(?:[A-Za-z0-9_-]{74}|[A-Za-z0-9_-]{58})T3BlbkFJ"
        + r"(?:[A-Za-z0-9_-]{74}|[A-Za-z0-9_-]{58})|[A-Za-z0-9]{20}T3BlbkFJ[A-Za-z0-9]{20})"
        + _R,
        prefixes=("sk-",),
    ),
    _rule(
        "anthropic-api-key",
        "Anthropic API key",
        _L + r"sk-ant-api03-[A-Za-z0-9_-]{93}AA" + _R,
        prefixes=("sk-ant-api03-",),
    ),
    _rule(
        "anthropic-admin-api-key",
        "Anthropic admin key",
        _L + r"sk-ant-admin01-[A-Za-z0-9_-]{93}AA" + _R,
        prefixes=("sk-ant-admin01-",),
    ),
    # Switchboard's own: an agent holds its endpoint's sbk_ token, so one that was talked into it
    # could post it; an owner's sbo_ token and a webhook's signing secret (whsec_) are credentials
    # too. Base64url bodies of exact lengths (``ids.new_token``). (An ingest token, wh_ and 32
    # such characters, is left out: as a token broken by spaces, a webhook's id, wh_ and 26
    # base32 characters, and the words after it would read as one.)
    _rule(
        "switchboard-token",
        "Switchboard token (sbk_, sbo_) or webhook signing secret (whsec_)",
        _L + r"(?:(?:sbk|sbo)_[A-Za-z0-9_-]{43}|whsec_[A-Za-z0-9_-]{32})(?![A-Za-z0-9_-])",
        3.0,
        prefixes=("sbk_", "sbo_", "whsec_"),
    ),
    # A block rule (see _blocks): as one regex, a lazy body between BEGIN and END backtracks
    # quadratically over text full of unterminated headers. Its body spans lines already, so it has
    # no prefixes for the split-token view.
    Rule(
        "private-key",
        re.compile(r"-----BEGIN[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----"),
        "PEM private key block",
        end=re.compile(r"-----END[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----"),
        min_body=64,
    ),
)


def _blocks(rule: Rule, text: str) -> bool:
    """A header, a body of at least ``min_body`` characters, a footer; one forward pass."""
    assert rule.end is not None
    pos = 0
    while (begin := rule.pattern.search(text, pos)) is not None:
        end = rule.end.search(text, begin.end())
        if end is None:
            return False  # no footer anywhere after this header, so none after any later one
        if end.start() - begin.end() >= rule.min_body:
            return True
        pos = end.end()
    return False


def shannon_entropy(text: str) -> float:
    if not text:
        return 0.0
    counts = Counter(text)
    return -sum(n / len(text) * math.log2(n / len(text)) for n in counts.values())


# --- Views: the text as a reader or a browser would see it -------------------------------------

# A backslash escape as written in a string literal or JSON (backslash, "n", then the token): its
# letter would otherwise glue onto the token that follows.
_ESCAPE = re.compile(r"\\[nrtfvb0]")
# A Markdown backslash escape: CommonMark renders a backslash before any ASCII punctuation as that
# character alone, so `ghp\_…` or `glpat\-…` in a GitHub, Gitea or Linear comment reads as the token.
# (`\\` is one backslash: matched first, left to right, it keeps the character after it escaped.)
_MARKDOWN_ESCAPE = re.compile(r"\\([!-/:-@\[-`{-~])")
# Escapes that spell a character: JSON/JavaScript `\u0067` and `\u{67}`, Python `\U00000067` and
# `\x67`, and JSON's `\/` (a Slack webhook URL inside a JSON string).
_CHAR_ESCAPE = re.compile(
    r"\\u\{([0-9A-Fa-f]{1,6})\}|\\u([0-9A-Fa-f]{4})|\\U([0-9A-Fa-f]{8})|\\x([0-9A-Fa-f]{2})|\\(/)"
)
_SURROGATE = re.compile("[\ud800-\udfff]")
# Characters that render as nothing, beyond the Cf (format) and Cc (control) categories: the
# combining grapheme joiner, Hangul and Khmer fillers, the Mongolian vowel separator, the blank
# Braille pattern. Variation selectors are checked by range in _invisible.
_INVISIBLE = frozenset({0x034F, 0x115F, 0x1160, 0x17B4, 0x17B5, 0x180E, 0x2800, 0x3164, 0xFFA0})
_PLAIN = frozenset(chr(c) for c in range(0x20, 0x7F)) | {"\t", "\n", "\r"}
_HTML_TAG = re.compile(r"</?[A-Za-z][A-Za-z0-9-]{0,30}(?:\s[^<>]{0,256})?/?>")
# A Markdown link or image, inline (with or without a title) or by reference, renders as its text
# alone: `[ghp_abc](u)def`, `[ghp_abc](u "t")def` and `[ghp_abc][1]def` read `ghp_abcdef`. No part
# can cross the brackets, parentheses or quotes that end it, so each is one forward pass.
_MARKDOWN_LINK = re.compile(
    r"!?\[([^\[\]\n]{0,256})\]"
    r"(?:\([^()\s]{0,2048}(?:[ \t]{1,8}(?:\"[^\"\n]{0,256}\"|'[^'\n]{0,256}'))?\)"
    r"|\[[^\[\]\n]{0,256}\])"
)
# A Slack mrkdwn link renders as its text alone: `<https://x|ghp_abc>def` reads `ghp_abcdef`.
_SLACK_LINK = re.compile(r"<[^<>|\s]{1,2048}\|([^<>\n]{0,256})>")
# Markdown emphasis or a code span inside a word (`ghp_abc**def**`) renders the word unbroken.
_MARKUP = re.compile(r"(?<=[A-Za-z0-9])[*`~]{1,3}(?=[A-Za-z0-9_-])")


def _spell_escape(match: re.Match[str]) -> str:
    if match.group(5):
        return "/"
    code = int(next(g for g in match.groups()[:4] if g), 16)
    return chr(code) if code <= 0x10FFFF else match.group()


def _decode_escapes(text: str) -> str:
    decoded = _CHAR_ESCAPE.sub(_spell_escape, text)
    if _SURROGATE.search(decoded):
        # `\ud83d\ude00` is one character written as two escapes; a lone half is not text.
        decoded = decoded.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return decoded


def _invisible(char: str) -> str | None:
    """What an unusual character renders as: nothing, a space, or itself (None)."""
    code = ord(char)
    category = unicodedata.category(char)
    if category in ("Cf", "Cc", "Cs") or code in _INVISIBLE:
        return ""
    if 0xFE00 <= code <= 0xFE0F or 0xE0100 <= code <= 0xE01EF:
        return ""  # variation selectors
    if category == "Zs":
        return " "  # a no-break, thin or hair space splits a token like a space: see _split_tokens
    if category in ("Zl", "Zp"):
        return "\n"
    return None


def _strip_invisible(text: str) -> str:
    # One lookup per distinct unusual character, then one C-level pass.
    table: dict[int, str] = {}
    for char in set(text) - _PLAIN:
        if (replacement := _invisible(char)) is not None:
            table[ord(char)] = replacement
    return text.translate(table) if table else text


def _strip_comments(text: str) -> str:
    """HTML comments removed in one forward pass (an unterminated one hides the rest, as it does in
    a browser); `str.find`, because a lazy `<!--.*?-->` rescans the rest once per unclosed opener."""
    out: list[str] = []
    pos = 0
    while (start := text.find("<!--", pos)) != -1:
        out.append(text[pos:start])
        end = text.find("-->", start + 2)  # from +2: `<!-->` closes itself
        if end == -1:
            return "".join(out)
        pos = end + 3
    out.append(text[pos:])
    return "".join(out)


def _normalise(text: str, tags: bool = True) -> str:
    """The text as it renders: comments, entities and (with ``tags``) tags undone, compatibility
    forms (fullwidth letters) folded by NFKC, invisible characters dropped, odd spaces made plain."""
    if "<!--" in text:
        text = _strip_comments(text)
    if "&" in text:
        text = html.unescape(text)
        if "<!--" in text:
            text = _strip_comments(text)
    if tags and "<" in text:
        text = _HTML_TAG.sub("", _SLACK_LINK.sub(r"\1", text))
    if tags and ("](" in text or "][" in text):
        # With ``tags`` only, as a tag or a Slack link: the other view keeps a token in the address.
        text = _MARKDOWN_LINK.sub(r"\1", text)
    if not _PLAIN.issuperset(text):
        text = _strip_invisible(unicodedata.normalize("NFKC", _strip_invisible(text)))
    if "*" in text or "`" in text or "~" in text:
        text = _MARKUP.sub("", text)
    return text


def _views(text: str) -> list[str]:
    """The text as written, and as a reader (or a browser) would decode it: percent-escapes of a
    URL undone (`?t=%3Dghp_…`, `%0Aghp_…`), `\\u0067` escapes spelled out, rendered (``_normalise``),
    with backslash escapes turned into spaces, and with Markdown's backslash escapes undone
    (`ghp\\_…` renders as `ghp_…`). Each is one linear pass; duplicates are dropped."""
    views = [text]

    def add(view: str) -> None:
        if view not in views:
            views.append(view)

    if "%" in text:
        add(unquote(text))
    decoded = _decode_escapes(text) if "\\" in text else text
    if "%" in decoded:
        decoded = unquote(decoded)
    add(decoded)
    for base in (text, decoded):
        add(_normalise(base))
        if "<" in base or "&" in base:
            # With the tags kept: removing `<a href="…">` would take a token in the link with it.
            add(_normalise(base, tags=False))
    for view in list(views):
        if "\\" in view:
            add(_ESCAPE.sub(" ", view))
            add(_MARKDOWN_ESCAPE.sub(r"\1", view))
    return views


# --- Matching ------------------------------------------------------------------------------------

# Each character as its class (lower case, upper case, digit; any other stands for itself).
_CLASSES = str.maketrans(
    string.ascii_lowercase + string.ascii_uppercase + string.digits,
    "a" * 26 + "A" * 26 + "0" * 10,
)


def _looks_generated(rule: Rule, secret: str, joins: Iterable[int] = ()) -> bool:
    """Whether the secret's body mixes character classes the way a random key does.

    Counted: changes of class between neighbours, except upper to lower case (a capital starting a
    word) and except where two pieces were joined (``joins``, offsets in ``secret``). Words change
    class rarely: `placeholderValue` once; "tokens expire after 90 days unless renewed" or the same
    in Title Case, joined after "ghp_", twice in 36 characters. A random base62 body changes at
    about 4 pairs in 10 and nearly always holds a digit. So a body with a digit needs a change per 6
    characters, one without a change per 4. A split 16-character AWS key id (upper case and 2-7
    only) fails this about one time in 17 and is let through: shouted prose after "AKIA " looks the
    same."""
    start = 0
    for prefix in rule.prefixes:
        if secret.startswith(prefix):
            start = len(prefix)
            break
    classes = secret.translate(_CLASSES)
    skip = set(joins)
    changes = sum(
        1
        for i in range(start + 1, len(classes))
        if classes[i - 1] != classes[i] and (classes[i - 1], classes[i]) != ("A", "a") and i not in skip
    )
    length = len(secret) - start
    if "0" in classes[start:]:
        return changes >= max(2, length // 6)
    return length >= 8 and changes >= length // 4


def _joined_to_identifier(text: str, start: int) -> bool:
    """Whether underscores join the match to a word before it (`use_sk_…`, `MY_ghp_…`)."""
    pos = start
    while pos > 0 and text[pos - 1] == "_":
        pos -= 1
    return 0 < pos < start and text[pos - 1].isascii() and text[pos - 1].isalnum()


def _matches(rule: Rule, view: str) -> bool:
    if rule.end is not None:
        return _blocks(rule, view)
    for match in rule.pattern.finditer(view):
        secret = match.group(rule.group)
        if shannon_entropy(secret) < rule.min_entropy:
            continue
        # `use_sk_test_placeholder` is an identifier, `use_sk_test_4eC3…` (random) a key.
        if rule.wordlike and _joined_to_identifier(view, match.start()):
            if not _looks_generated(rule, secret):
                continue
        return True
    return False


# Split tokens: runs of token characters after a prefix, across gaps of a few spaces or newlines.
_JOIN_MAX_CHARS = 256  # per piece; longer than any rule's token (an OpenAI project key is 169)
_JOIN_MAX_PIECES = 16
# The pieces after a prefix, in one match: each alternation step needs a gap then a piece, and the
# two character classes are disjoint, so it cannot backtrack.
_RUN = re.compile(
    rf"[A-Za-z0-9_+/=-]{{0,{_JOIN_MAX_CHARS}}}"
    rf"(?:[ \t\r\n]{{1,8}}[A-Za-z0-9_+/=-]{{1,{_JOIN_MAX_CHARS}}}){{0,{_JOIN_MAX_PIECES - 1}}}"
)


def _width(pattern: re.Pattern[str]) -> tuple[int, int]:
    """The shortest and longest text ``pattern`` can match, so a split candidate is tried only at
    the gaps where a token could end (without it, a prefix before 16 gaps costs 16 regex calls)."""
    try:
        parser = importlib.import_module("re._parser")  # the stdlib's own; private, hence the fallback
        low, high = parser.parse(pattern.pattern, pattern.flags).getwidth()
        return int(low), int(high)
    except Exception:  # another Python: try every gap
        return 0, 1 << 30


@dataclass(frozen=True)
class _Joiner:
    anchors: re.Pattern[str]
    # A prefix as matched -> the rules a token starting with it can belong to, with their widths.
    rules_by_prefix: dict[str, tuple[tuple[Rule, int, int], ...]]


@lru_cache(maxsize=32)
def _joiner(rules: tuple[Rule, ...]) -> _Joiner | None:
    # A prefix is matched without its own whitespace (the gaps are optional), and an empty one
    # would anchor everywhere.
    spelled_by_rule = {rule: [q for p in rule.prefixes if (q := "".join(p.split()))] for rule in rules}
    prefixes = sorted({q for qs in spelled_by_rule.values() for q in qs}, key=len, reverse=True)
    if not prefixes:
        return None
    # Any prefix, itself possibly broken by short gaps (`gh p_…`), not glued to a word. The longest
    # prefix that matches wins the alternation; the rules of its shorter prefixes are tried too.
    spelled = ("[ \t\r\n]{0,3}".join(re.escape(c) for c in prefix) for prefix in prefixes)
    anchors = re.compile(_L + "(?:" + "|".join(spelled) + ")")
    widths = {rule: _width(rule.pattern) for rule, qs in spelled_by_rule.items() if qs}
    by_prefix = {
        prefix: tuple(
            (rule, *widths[rule])
            for rule in widths
            if any(prefix.startswith(q) for q in spelled_by_rule[rule])
        )
        for prefix in prefixes
    }
    return _Joiner(anchors, by_prefix)


def _split_tokens(view: str, rules: tuple[Rule, ...]) -> Rule | None:
    """A token broken by spaces or line breaks (`ghp_abc def`, or wrapped over lines), joined back.

    Only from a rule's prefix, only across gaps between runs of token characters, and only when the
    secret looks generated: joining every break would read prose after a prefix ("ghp_ tokens are
    classic personal access tokens", 36 letters) as a token. A candidate ends at each gap, so prose
    after the last piece does not hide the token. Bounded: 16 pieces of 256 characters from each
    prefix, tried only against the rules of that prefix and only at gaps where their tokens can end."""
    joiner = _joiner(rules)
    if joiner is None:
        return None
    for anchor in joiner.anchors.finditer(view):
        head = "".join(anchor.group().split())
        run = _RUN.match(view, anchor.end())
        following = run.group() if run is not None else ""
        pieces = following.split()
        if pieces and not following[:1].isspace():
            pieces[0] = head + pieces[0]
        else:
            pieces.insert(0, head)
        # Where the first break is: inside the prefix, or after the run that follows it.
        unbroken = 0 if len(head) != len(anchor.group()) else len(pieces[0])
        if len(pieces) == 1 and unbroken:
            continue  # nothing to join: the unbroken views see this
        joined = "".join(pieces)
        ends = list(accumulate(map(len, pieces)))
        for rule, shortest, longest in joiner.rules_by_prefix.get(head, ()):
            past_longest = False
            for end in ends:
                if end <= unbroken or end < shortest:
                    continue
                if end > longest:  # a match ending inside this piece is found here, once
                    if past_longest:
                        break
                    past_longest = True
                match = rule.pattern.match(joined, 0, end)
                if match is None or match.end() <= unbroken:
                    continue
                secret = match.group(rule.group)
                if shannon_entropy(secret) < rule.min_entropy:
                    continue
                offset = match.start(rule.group)
                if _looks_generated(rule, secret, (join - offset for join in ends)):
                    return rule
    return None


# Base64: a run long enough to hold the shortest token (20 characters encode to 28), possibly
# wrapped over lines as `base64` prints it; standard or URL-safe alphabet.
MAX_BASE64_RUNS = 256
_BASE64_RUN = re.compile(
    r"(?<![A-Za-z0-9+/_-])[A-Za-z0-9+/_-]{24,}(?:[ \t]*\r?\n[ \t]*[A-Za-z0-9+/_-]{4,})*={0,2}"
)
_UPPER = re.compile(r"[A-Z]")
_HEXISH = re.compile(r"[0-9A-Fa-f-]+")
_URLSAFE = str.maketrans("-_", "+/")


def _decode_base64(run: str) -> str | None:
    data = "".join(run.split()).rstrip("=")
    if ("-" in data or "_" in data) and ("+" in data or "/" in data):
        return None  # two alphabets at once: not base64
    data = data.translate(_URLSAFE)
    if len(data) % 4 == 1:
        data = data[:-1]
    try:
        raw = base64.b64decode(data + "=" * (-len(data) % 4), validate=True)
    except (binascii.Error, ValueError):
        return None
    return raw.decode("utf-8", "replace")


def _base64_texts(views: Sequence[str]) -> list[str]:
    """The decoded text of the first ``MAX_BASE64_RUNS`` plausible runs, one level deep (decoded text
    is scanned but never decoded again). A run without an uppercase letter (an identifier) or made
    of hex digits and dashes (a SHA, a UUID) is not plausible: base64 of text has capitals."""
    seen: set[str] = set()
    texts: list[str] = []
    for view in views:
        for run in _BASE64_RUN.finditer(view):
            candidate = run.group()
            if candidate in seen or not _UPPER.search(candidate) or _HEXISH.fullmatch(candidate):
                continue
            seen.add(candidate)
            if len(seen) > MAX_BASE64_RUNS:
                return texts
            if (decoded := _decode_base64(candidate)) is not None:
                texts.append(decoded)
    return texts


def _scan_views(views: Sequence[str], rules: tuple[Rule, ...]) -> Rule | None:
    for view in views:
        for rule in rules:
            if _matches(rule, view):
                return rule
    for view in views:
        if (found := _split_tokens(view, rules)) is not None:
            return found
    return None


def scan_rules(text: str, rules: Sequence[Rule] = RULES) -> Rule | None:
    """The first of ``rules`` that ``text`` matches in any view, or None."""
    rules = tuple(rules)
    views = _views(text)
    if (found := _scan_views(views, rules)) is not None:
        return found
    for decoded in _base64_texts(views):
        if (found := _scan_views(_views(decoded), rules)) is not None:
            return found
    return None


def scan(text: str, extra_rules: Iterable[Rule] = ()) -> Rule | None:
    """The first rule (the core ``RULES``, then ``extra_rules``) that ``text`` matches, or None.
    Never returns or logs the match itself."""
    extra = tuple(extra_rules)
    return scan_rules(text, RULES + extra if extra else RULES)
