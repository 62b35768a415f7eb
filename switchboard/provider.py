"""What a provider plugin deals in: the kinds it registers and the values their callables take and
return.

A provider (built in, like ``generic`` and ``stripe``, or a package under ``plugins/``) registers
``SourceKind`` and ``ConnectionKind`` objects through its ``register_kinds`` hook; each object carries
the behaviour of its kind (``verify``, ``derive_address``, ``echo_clues``; ``post``, ``test``), and the
core calls them only for that kind. Everything here is plain data so a third-party provider can be
read and tested without a server. Provider authors import these through ``switchboard.sdk``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol

import orjson

from switchboard.sanitize import indented, read_by_orjson, within
from switchboard.secretscan import Rule

SecretOrigin = Literal["minted", "provider", "none"]
PostState = Literal["sent", "failed", "unknown"]
ErrorClass = Literal["auth", "not_found", "forbidden", "rate_limited", "invalid", "server", "network"]


# ---------------------------------------------------------------------------------------------
# Inbound


@dataclass(frozen=True)
class Delivery:
    """A webhook request as received. ``headers`` look up case-insensitively."""

    source: str
    headers: Mapping[str, str]
    body: bytes
    received_at: datetime
    # The webhook's signing secret (None for kinds that have none).
    secret: str | None = None


@dataclass(frozen=True)
class Verdict:
    """What ``verify`` learned. Only ``ok`` verdicts are stored; the rest are refused.

    ``error`` picks the refusal: ``signature_invalid`` (401, the default) or ``invalid_body`` (400,
    the signature was good but the body cannot be read). ``detail`` is a short reason for the log and
    the event row; it never contains a signature or a secret.
    """

    ok: bool
    detail: str
    error: Literal["signature_invalid", "invalid_body"] = "signature_invalid"
    # The parsed body (JSON), for the address, the title and the todo payload.
    payload: Any = None
    # A dotted event name, e.g. "pull_request.opened", "event_callback.app_mention".
    event: str = ""
    # Deduplication key; None lets the core use "sha256:<hex of body>".
    delivery_key: str | None = None
    # A second key that also deduplicates (Slack: one message seen as message and app_mention).
    secondary_key: str | None = None
    title: str = ""
    # Housekeeping deliveries (ping, edits, joins): stored as "ignored", no todo.
    ignore: bool = False
    # Answer the sender with this JSON at once and store nothing (Slack url_verification).
    respond: dict[str, Any] | None = None

    @classmethod
    def refuse(cls, detail: str) -> Verdict:
        return cls(ok=False, detail=detail)

    @classmethod
    def bad_body(cls, detail: str) -> Verdict:
        return cls(ok=False, detail=detail, error="invalid_body")


# The longest ``Address.display`` a reply can be made to: its reply row keeps the display, which
# is also its echo thread key, in columns of this length (``Reply.display``, ``Reply.thread_key``).
# Ingest keeps no longer address; cutting one short would stop echo suppression matching it.
DISPLAY_MAX = 300


@dataclass(frozen=True)
class Address:
    """Where a reply goes, derived from a verified delivery and frozen on the todo.

    ``provider`` names the connection kind that can post to it. ``fields`` are the non-secret,
    strictly validated parts (repo, number, channel, …) that become URL path parts at posting time.
    ``display`` is at most ``DISPLAY_MAX`` characters in any address a todo keeps.
    """

    kind: str
    provider: str
    display: str
    fields: Mapping[str, Any]

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "provider": self.provider, "display": self.display, **self.fields}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Address:
        rest = {k: v for k, v in data.items() if k not in ("kind", "provider", "display")}
        return cls(kind=data["kind"], provider=data["provider"], display=data["display"], fields=rest)


@dataclass(frozen=True)
class EchoClues:
    """What in a delivery could show it is Switchboard's own reply; the core does the matching.

    ``object_ids``: provider object ids of the thing that was posted (forge comment id, Slack
    ``channel:ts``, Cairn comment id). ``marker``: the reply id named by an invisible marker (see
    ``find_marker``). ``bot_id``: the bot that posted (Slack). The core adds the thread (the derived
    address's display), which a marker's reply must share.
    """

    object_ids: tuple[str, ...] = ()
    marker: str | None = None
    bot_id: str | None = None


@dataclass(frozen=True)
class Actors:
    """Who a verified delivery names, read from its signed body only (docs/plugins.md, "Trusted
    actors"). ``sender``: who caused the delivery (a forge's ``sender.login``, Cairn's
    ``data.actor_id``). ``authors``: who wrote what it is about (a forge comment's or review's user,
    then the thread's author when that is someone else). Values are ids or logins, never display
    names; a kind's ``actors`` never raises and leaves out anything that is not a plain string."""

    sender: str | None = None
    authors: tuple[str, ...] = ()


@dataclass(frozen=True)
class TrustSpec:
    """The trusted-actors setting a source kind accepts (``switchboard.trust`` checks and applies it).

    ``field``: the key of the list in a webhook's trust config (``logins``, ``actor_ids``). ``label``:
    what one entry is, for people (``GitHub login``). ``case_insensitive``: compare entries and actors
    without regard to case (forge logins). ``matches``: the match modes offered, the first being the
    default: ``sender``, ``author`` (any of ``Actors.authors``), ``both`` (the sender and an author).
    """

    field: str
    label: str
    case_insensitive: bool = True
    matches: tuple[str, ...] = ("sender",)


# ---------------------------------------------------------------------------------------------
# Outbound


@dataclass(frozen=True)
class Response:
    """A provider's answer, as the guarded client returns it (the body already size-capped)."""

    status: int
    headers: Mapping[str, str]
    body: bytes

    def json(self) -> Any:
        """The body as JSON, or None when it is not JSON (or nests deeper than the parser goes: a
        1 MiB answer can, and the kinds that read it, GraphQL's, took the RecursionError for a fault)."""
        try:
            return json.loads(self.body)
        except (ValueError, UnicodeDecodeError, RecursionError):
            return None


class HttpClient(Protocol):
    """The guarded outbound client (``switchboard.outbound.Outbound``), named here by its shape
    because that module imports this one. Never follows a redirect; raises ``OutboundError``."""

    async def request(
        self,
        method: str,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        json_body: Any = None,
        params: Mapping[str, str] | None = None,
    ) -> Response: ...


@dataclass(frozen=True)
class ReplyPost:
    """One reply to post. ``http`` is the guarded outbound client: the only way out."""

    http: HttpClient
    kind: str
    account_key: str
    secret: str
    address: Address
    text: str
    reply_id: str
    # The kind's own settings as the operator set them (or their defaults), by variable name:
    # ``settings["SWITCHBOARD_GITHUB_API_URL"]``. Tenants never set these.
    settings: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class PostResult:
    """The outcome of one dial.

    ``state``: ``sent``, ``failed`` (the provider refused, nothing was written) or ``unknown`` (the
    request may have been written). ``retryable`` marks the only outcomes the core retries: a
    connect that failed before anything was sent, and a 429.
    """

    state: PostState
    object_id: str | None = None
    permalink: str | None = None
    error_class: ErrorClass | None = None
    error_code: str | None = None
    retry_after: float | None = None
    retryable: bool = False


@dataclass(frozen=True)
class CheckResult:
    ok: bool
    error_class: ErrorClass | None = None
    detail: str = ""
    # Facts learned by the test call and kept on the connection (Slack: bot_id, user_id).
    facts: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ConnectionCheck:
    """What a connection ``test`` call gets: the same guarded client and credential as a post."""

    http: HttpClient
    kind: str
    account_key: str
    secret: str
    # As ``ReplyPost.settings``.
    settings: Mapping[str, str] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------
# Registration


def no_address(delivery: Delivery, verdict: Verdict) -> Address | None:
    """``derive_address`` of a kind whose deliveries are never conversations."""
    return None


def no_echo_clues(delivery: Delivery, verdict: Verdict) -> EchoClues:
    """``echo_clues`` of a kind Switchboard never posts to."""
    return EchoClues()


@dataclass(frozen=True)
class Setting:
    """An operator setting a kind declares, read from the environment like the core's.

    ``name`` is the whole variable name and starts with ``SWITCHBOARD_<KIND>_`` (the kind's name in
    upper case). ``check`` turns what the operator wrote into the value the kind gets, or raises
    ``ValueError`` with a short reason: a bad value stops start-up with ``error: <name>: <reason>``.
    ``default`` (already in checked form) applies when the variable is unset or empty. A ``secret``
    setting's value is never shown (``switchboard plugins`` says only whether it is set).
    """

    name: str
    description: str
    default: str | None = None
    check: Callable[[str], str] = str.strip
    secret: bool = False


@dataclass(frozen=True)
class SourceKind:
    """A kind of webhook and what reads it.

    ``secret``: ``minted`` (Switchboard mints ``whsec_…``), ``provider`` (the owner pastes the
    provider's secret; the webhook waits until then) or ``none`` (trust is the unguessable URL).

    The core calls the three callables only with deliveries of this kind, so none of them checks
    ``delivery.source``. Each is a plain function (never ``async def``) that returns at once and never
    raises on hostile input (a raise is a provider fault: the delivery is answered 503):

    * ``verify(delivery) -> Verdict``: the constant-time signature check and the reading of the body;
    * ``derive_address(delivery, verdict) -> Address | None``: the reply address of a *verified*
      delivery, or None (not a conversation, or any field outside its strict charset);
    * ``echo_clues(delivery, verdict) -> EchoClues``: what could make it Switchboard's own reply;
    * ``actors(delivery, verdict) -> Actors`` (optional): who a *verified* delivery names, for the
      webhook's trusted actors.

    ``trust``: the trusted-actors setting the kind accepts (``TrustSpec``); set together with
    ``actors`` or not at all, and only on a signed kind. A kind without them (generic, stripe, slack)
    skips the trust step.

    ``secret_rules``: secret-scan rules for this kind's credential formats; a reply matching one is
    refused, whatever kind it is posted to.

    ``payload_is_body``: the kind never edits a value ``json_object`` returned, in ``verify`` or in
    the other callables. When ``verdict.payload`` is that value, read from ``delivery.body`` itself
    (not from a form field, say), the todos keep no copy of it: they read the stored event's body,
    byte for byte, so the database stores it once. A payload the kind builds is stored as before.
    Leave it False when the kind edits what ``json_object`` returned: with it set, such an edit in
    place would be ignored.
    """

    name: str
    secret: SecretOrigin
    verify: Callable[[Delivery], Verdict]
    derive_address: Callable[[Delivery, Verdict], Address | None] = no_address
    echo_clues: Callable[[Delivery, Verdict], EchoClues] = no_echo_clues
    description: str = ""
    secret_rules: tuple[Rule, ...] = ()
    actors: Callable[[Delivery, Verdict], Actors] | None = None
    trust: TrustSpec | None = None
    payload_is_body: bool = False


@dataclass(frozen=True)
class ConnectionKind:
    """A kind of outbound credential, the rules for matching it to an address, and posting with it.

    The core calls these only with addresses whose ``provider`` is this kind, so none checks it.
    ``post(post) -> PostResult`` and ``test(check) -> CheckResult`` may be ``async def``; the others
    are plain functions that answer at once.
    """

    name: str
    # Normalise what an owner typed as the account key; raise ValueError if it is unusable.
    normalize_account_key: Callable[[str], str]
    # Does the connection with this account key serve this address? (Exact host / team / instance.)
    account_matches: Callable[[str, Address], bool]
    # The string a ``targets`` allowlist glob is matched against (repo, channel id, artifact id).
    target_of: Callable[[Address], str]
    text_limit: int
    # One harmless authenticated read with the credential (``switchboard connection test``).
    test: Callable[[ConnectionCheck], Awaitable[CheckResult]]
    # Post ``post.text`` once to ``post.address`` through ``post.http``, add the invisible marker
    # naming ``post.reply_id``, and report the outcome (never a provider response body).
    post: Callable[[ReplyPost], Awaitable[PostResult]]
    default_account_key: str | None = None
    description: str = ""
    # What the account key is, for people adding a connection (the web form's hint).
    account_key_hint: str = ""
    # The instance an address names, as this kind's normalised account key (``github.com``,
    # ``https://git.example.com/gitea``), or None when the address does not say. A webhook is bound
    # to one instance (docs/replying.md, "A webhook serves one instance"): the core compares this
    # with the binding. None here (Slack,
    # where one app serves many workspaces through one API host) means webhooks of the kind are
    # never bound.
    instance_of: Callable[[Address], str | None] | None = None
    # Operator settings of this kind (``Setting``), e.g. its API base ``SWITCHBOARD_<KIND>_API_URL``.
    settings: tuple[Setting, ...] = ()
    # As ``SourceKind.secret_rules``: the credential formats of this kind.
    secret_rules: tuple[Rule, ...] = ()


# The invisible marker a reply carries, naming its reply id, so that the provider's webhook for our
# own post is recognised even when it arrives before the POST returns. Forges and Cairn append it as
# a trailing HTML comment; Slack carries it in message metadata (event_type below).
MARKER_EVENT_TYPE = "switchboard_reply"
_MARKER_RE = re.compile(r"<!--\s*switchboard:reply:(rp_[0-9a-z]{26})\s*-->\s*\Z")


def reply_marker(reply_id: str) -> str:
    """The trailing HTML comment a forge or Cairn reply ends with."""
    return f"\n\n<!-- switchboard:reply:{reply_id} -->"


def find_marker(text: object) -> str | None:
    """The reply id in a trailing marker of ``text``, if any."""
    if not isinstance(text, str):
        return None
    match = _MARKER_RE.search(text)
    return match.group(1) if match else None


# orjson reads an integer past 64 bits (below -2**63 or above 2**64 - 1) as a float, where the
# standard library reads it exactly. Such a float is at least 9.2e18 in size, and orjson writes
# every float from 1e16 up as Python's ``repr`` does, with an exponent: ``1.8446744073709552e+19``.
# So when orjson's own writing of what it read holds no ``e+``, it read every integer exactly. That
# writing is made for the depth check anyway, and a search of it for ``+`` is a memchr, under a µs;
# the digit check it spares (a ``translate`` of the whole body) took 19 µs on a 28 KB GitHub body,
# two thirds of orjson's read (issue 12). (A search for the two bytes ``e+`` took 24 µs: ``e`` is
# everywhere in text.) A body whose writing holds ``e+`` (a big float, or those two characters in a
# string) is judged by the digit check as before: an integer orjson would read as a float is
# written with 19 digits or more.
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
_LONG_NUMBER = b"0" * 19
# orjson reads nesting up to 1,024 levels; the standard library gives up (RecursionError) short of
# Python's recursion limit, how far short depending on the stack it is called from. Both read
# every body alike that nests at most ``MAX_PAYLOAD_DEPTH`` deep, or that has at most this many
# brackets (a bound on its nesting).
_FEW_BRACKETS = 500
_NOT_OPENING = bytes(c for c in range(256) if c not in b"{[")


# How many ``+`` ``_has_exponent`` looks at one by one. A body may hold millions (a diff in a string):
# past this many it answers True, and the digit check (one pass in C) decides.
_PLUS_LOOKS = 16


def _has_exponent(written: bytes) -> bool:
    """Whether ``written`` may hold ``e+``: True when it does, or when it holds more ``+`` than
    ``_PLUS_LOOKS`` (``+`` is rare in a payload, ``e`` everywhere). Looking at each ``+`` of 5 MiB
    of them in Python took a second."""
    at = written.find(b"+")
    for _ in range(_PLUS_LOOKS):
        if at == -1:
            return False
        if at and written[at - 1] == ord("e"):
            return True
        at = written.find(b"+", at + 1)
    return at != -1


def _json_value(body: bytes) -> Any:
    """``json.loads(body)``, by orjson where the answer is the same (several times faster on a
    30 KB webhook body). orjson refuses what only the standard library reads (NaN and Infinity,
    lone surrogates, a byte order mark, UTF-16): that goes to it as before. It reads an integer
    past 64 bits as a float (``_has_exponent``), and it nests deeper than the standard library can, so
    what it read must nest at most ``MAX_PAYLOAD_DEPTH`` deep (the check ``storable_encoded`` then
    skips) or hold at most ``_FEW_BRACKETS`` brackets."""
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        return json.loads(body)
    written = indented(value)  # None: nested 255 levels or more
    if (written is None or _has_exponent(written)) and _LONG_NUMBER in body.translate(_DIGITS_AS_ZERO):
        return json.loads(body)
    if written is not None and within(written):
        read_by_orjson(value, shallow=True, source=body)
        return value
    # Deleting every other byte counts both brackets in one pass (two ``count`` calls: 1.6x).
    if len(body.translate(None, _NOT_OPENING)) <= _FEW_BRACKETS:
        read_by_orjson(value, source=body)
        return value
    return json.loads(body)


def json_object(body: bytes) -> dict[str, Any] | None:
    """The body as a JSON object, or None if it is not one."""
    try:
        value = _json_value(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        # RecursionError: a hostile body of deeply nested brackets is simply not a usable object.
        return None
    return value if isinstance(value, dict) else None


def _bytes(text: str) -> bytes:
    # Header values may hold anything: aiohttp decodes undecodable bytes as lone surrogates
    # ('\udcff'), which plain UTF-8 refuses to encode.
    return text.encode("utf-8", errors="surrogatepass")


def hmac_sha256_hex(secret: str, message: bytes) -> str:
    return hmac.new(_bytes(secret), message, hashlib.sha256).hexdigest()


def same(a: object, b: object) -> bool:
    """Constant-time string comparison. Never raises: anything but two equal strings (non-ASCII,
    lone surrogates and non-strings included) is simply not the same."""
    if not isinstance(a, str) or not isinstance(b, str):
        return False
    return hmac.compare_digest(_bytes(a), _bytes(b))


def one_line(text: str, limit: int = 80) -> str:
    """Collapse whitespace to one line and cut to ``limit`` characters (for titles)."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
