"""Configuration from the environment (prefix ``SWITCHBOARD_``), validated once at startup.

The core's settings are the fields below. A provider kind declares its own (``SWITCHBOARD_<KIND>_…``,
e.g. ``SWITCHBOARD_GITHUB_API_URL``); those are kept here as they were given, beside the fields
(``plugin_value``), and checked by the kind once the providers are loaded (``plugins.Providers``).
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import logging
import os
import re
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, ValidationError, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

ENV_PREFIX = "SWITCHBOARD_"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
PLUGIN_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
# A scraper's bearer token for /metrics: long enough to be a secret, and what a header can carry.
METRICS_TOKEN_RE = re.compile(r"[\x21-\x7e]{16,200}")


class ConfigError(Exception):
    """A configuration value is unusable; the message names the variable."""


class Settings(BaseSettings):
    # "allow": a provider kind's settings (``github_api_url``, …) are kept as extra values.
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="allow", frozen=True)

    database_url: str = "sqlite+aiosqlite:///./switchboard.db"
    base_url: str = "http://127.0.0.1:8080"
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)
    secret_encryption_key: SecretStr | None = None
    outbound_allow_http: bool = False
    # Kept as text so that a plain comma list works (pydantic-settings would want JSON for a list).
    outbound_allow_cidrs: str = ""
    # Outbound fairness: connections per destination host, dials in flight per owner scope, and
    # the seconds a dial may wait for a slot and connect before it ends failed (nothing sent).
    outbound_limit_per_host: int = Field(20, ge=1, le=100)
    outbound_limit_per_owner: int = Field(8, ge=1, le=100)
    outbound_connect_seconds: float = Field(5.0, gt=0, le=60)
    reply_grace_seconds: int = Field(900, ge=0, le=7 * 24 * 3600)
    reply_todo_cap: int = Field(20, ge=1, le=10_000)
    # MCP sessions one process holds, per owner scope (the sum over its endpoints: a human or a
    # team) and in all. An owner at its limit loses its own oldest idle session; the process limit
    # evicts from the largest holder, so one tenant's flood never refuses another's first session.
    max_sessions_per_owner: int = Field(256, ge=1, le=1_000_000)
    max_sessions: int = Field(10_000, ge=1, le=1_000_000)
    # Live (active, unexpired) endpoints one owner scope may hold; vending more is a conflict.
    max_endpoints_per_owner: int = Field(100, ge=1, le=1_000_000)
    # Ingest admission: a token bucket per webhook, in each process (deliveries per second and the
    # burst it allows); either 0 turns the guard off.
    ingest_rate: float = Field(50.0, ge=0, le=1_000_000, allow_inf_nan=False)
    ingest_burst: int = Field(500, ge=0, le=1_000_000)
    # Proxies (comma-separated CIDRs) whose X-Forwarded-For names the client; empty: none.
    trusted_proxies: str = ""
    # After a webhook's signing secret is rotated or replaced, the old one still verifies for this
    # many seconds (time to update the provider); 0 ends it at once. "Expire old now" ends it early.
    secret_overlap_seconds: int = Field(24 * 3600, ge=0, le=30 * 24 * 3600)
    # Which provider plugins load (entry-point or package names, comma-separated): None loads every
    # installed one, "" none of them; the built-ins load unless disabled.
    plugins: str | None = None
    disable_plugins: str = ""
    # Routing rules (docs/routing.md): the time one rule may run, the time a delivery's rules may
    # take together (waiting for a free worker included), and the worker processes that run them.
    rule_timeout_ms: int = Field(200, ge=10, le=10_000)
    rule_budget_ms: int = Field(1000, ge=10, le=60_000)
    rule_workers: int = Field(2, ge=1, le=64)
    log_level: str = "INFO"
    # The bearer token ``GET /metrics`` requires (``Authorization: Bearer …``). Unset, /metrics
    # answers whoever reaches the port, and its series name every tenant's webhooks (their refusals).
    metrics_token: SecretStr | None = None

    @field_validator("database_url")
    @classmethod
    def _database_url(cls, value: str) -> str:
        if not value.startswith(("sqlite+aiosqlite://", "postgresql+asyncpg://", "postgresql://")):
            raise ValueError("must start with sqlite+aiosqlite:// or postgresql+asyncpg://")
        if value.startswith("postgresql://"):
            value = "postgresql+asyncpg://" + value.removeprefix("postgresql://")
        try:
            url = make_url(value)
        except (ArgumentError, ValueError):
            # Never the URL or the parser's message: either may hold part of the password (an
            # unescaped "@" or ":" in it moves its tail to where the port goes).
            raise ValueError(
                "is not a database URL (is the port a number? percent-encode @ : / in the password)"
            ) from None
        if url.get_backend_name() == "sqlite" and (
            url.database in (None, "", ":memory:") or url.query.get("mode") == "memory"
        ):
            # It lives in one connection and goes with it: serve migrated one database and served
            # another, empty one (every request 503), and each CLI command had its own.
            raise ValueError(
                "is an in-memory SQLite database, which is gone when its connection closes; name a "
                "database file (sqlite+aiosqlite:///path/to/switchboard.db)"
            )
        return value

    @field_validator("host")
    @classmethod
    def _host(cls, value: str) -> str:
        # aiohttp reads "" as every interface: an env file's empty ``SWITCHBOARD_HOST=`` would
        # open the API, the web UI and /metrics to the network.
        if not value or " " in value or not value.isprintable():
            raise ValueError(
                "must name an address or host name to listen on (0.0.0.0 or :: for every interface)"
            )
        return value

    @field_validator("base_url")
    @classmethod
    def _url(cls, value: str) -> str:
        return http_url(value)

    @field_validator("plugins", "disable_plugins")
    @classmethod
    def _plugin_names(cls, value: str | None) -> str | None:
        for name in plugin_names(value or ""):
            if not PLUGIN_NAME_RE.fullmatch(name):
                raise ValueError(
                    f"{name!r} is not a plugin name (comma-separated entry-point or package names)"
                )
        return value

    @field_validator("secret_encryption_key")
    @classmethod
    def _key(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None or not value.get_secret_value():
            return None
        try:
            raw = base64.b64decode(value.get_secret_value(), validate=True)
        except (binascii.Error, ValueError):
            raise ValueError("must be base64 (run `switchboard keygen` for one)") from None
        if len(raw) != 32:
            raise ValueError("must decode to exactly 32 bytes (run `switchboard keygen` for one)")
        return value

    @field_validator("metrics_token")
    @classmethod
    def _metrics_token(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None or not value.get_secret_value():
            return None
        if not METRICS_TOKEN_RE.fullmatch(value.get_secret_value()):
            # The message never repeats the value: it is a secret.
            raise ValueError(
                "must be 16 to 200 visible ASCII characters without spaces "
                "(`switchboard keygen` prints one that will do)"
            )
        return value

    @field_validator("outbound_allow_cidrs", "trusted_proxies")
    @classmethod
    def _cidrs(cls, value: str) -> str:
        for part in filter(None, (p.strip() for p in value.split(","))):
            try:
                ipaddress.ip_network(part, strict=False)
            except ValueError:
                raise ValueError(f"{part!r} is not a network in CIDR form") from None
        return value

    @field_validator("rule_budget_ms")
    @classmethod
    def _rule_budget(cls, value: int, info: ValidationInfo) -> int:
        timeout = info.data.get("rule_timeout_ms")
        if isinstance(timeout, int) and value < timeout:
            raise ValueError(f"must be at least SWITCHBOARD_RULE_TIMEOUT_MS ({timeout})")
        return value

    @field_validator("log_level")
    @classmethod
    def _log_level(cls, value: str) -> str:
        if value.upper() not in LOG_LEVELS:
            raise ValueError(f"must be one of {', '.join(LOG_LEVELS)}")
        return value.upper()

    @property
    def encryption_key(self) -> bytes | None:
        """The raw 32-byte key, or None when none is configured."""
        if self.secret_encryption_key is None:
            return None
        return base64.b64decode(self.secret_encryption_key.get_secret_value())

    @property
    def allow_cidrs(self) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
        parts = filter(None, (p.strip() for p in self.outbound_allow_cidrs.split(",")))
        return [ipaddress.ip_network(p, strict=False) for p in parts]

    @property
    def trusted_proxy_networks(self) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
        parts = filter(None, (p.strip() for p in self.trusted_proxies.split(",")))
        return [ipaddress.ip_network(p, strict=False) for p in parts]

    @property
    def plugin_allowlist(self) -> frozenset[str] | None:
        """The installed plugins to load (normalised names), or None for all of them."""
        return None if self.plugins is None else frozenset(map(plugin_key, plugin_names(self.plugins)))

    @property
    def plugin_denylist(self) -> frozenset[str]:
        return frozenset(map(plugin_key, plugin_names(self.disable_plugins)))

    def plugin_value(self, name: str) -> str | None:
        """The value of a provider kind's setting (``SWITCHBOARD_GITHUB_API_URL``), as given, or None."""
        value = (self.model_extra or {}).get(name.removeprefix(ENV_PREFIX).lower())
        return None if value is None else str(value)

    @property
    def log_level_number(self) -> int:
        # The validator keeps log_level to the names in LOG_LEVELS, all of which are in the mapping.
        return logging.getLevelNamesMapping()[self.log_level]


def http_url(value: str) -> str:
    """An http(s) URL without its trailing slash; ValueError otherwise. Paths are appended to it
    (``/webhooks/…``, ``/mcp``, a kind's API methods), so it names a host and has no query."""
    if not value.startswith(("http://", "https://")):
        raise ValueError("must be an http:// or https:// URL")
    if " " in value or not value.isprintable():
        # A space or line break (an env file's trailing one) would be pasted into every printed URL.
        raise ValueError("must be a URL without spaces or control characters")
    try:
        host = urlsplit(value).hostname
    except ValueError:  # an unbalanced "[" of an IPv6 address
        host = None
    if not host:
        raise ValueError("must name a host, e.g. https://switchboard.example.com")
    if "?" in value or "#" in value:
        raise ValueError("must have no query or fragment: paths are appended to it")
    return value.rstrip("/")


def plugin_names(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


def plugin_key(name: str) -> str:
    """A plugin or package name compared as pip compares package names (case, ``-``/``_``/``.``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _kind_settings_from_environment() -> dict[str, str]:
    """Every ``SWITCHBOARD_*`` variable that is not a core field, for the provider kinds to read."""
    core = set(Settings.model_fields)
    out = {}
    for name, value in os.environ.items():
        if name.upper().startswith(ENV_PREFIX):
            field = name[len(ENV_PREFIX) :].lower()
            if field and field not in core:
                out[field] = value
    return out


def load_settings(**overrides: object) -> Settings:
    """Read the environment; raise ConfigError naming the first bad variable."""
    try:
        return Settings(**{**_kind_settings_from_environment(), **overrides})  # type: ignore[arg-type]
    except ValidationError as exc:
        first = exc.errors()[0]
        field = str(first["loc"][0]) if first["loc"] else "?"
        message = first["msg"].removeprefix("Value error, ")
        raise ConfigError(f"{ENV_PREFIX}{field.upper()}: {message}") from None
