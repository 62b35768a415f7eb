"""The trusted-actor options of ``webhook create`` and ``webhook trust`` (docs/routing.md, "Trusted
actors"), and a webhook's trust in one line for people.

A kind with actors keeps one list (its ``TrustSpec.field``: ``logins`` for the forges, ``actor_ids``
for cairn, linear and plain). ``--trust``, ``--login`` and ``--actor-id`` are one repeatable option
under three names, each adding an entry to that list whatever the kind calls it: an operator writes
the name that reads right for the kind, and no spelling is refused for being the "wrong" one
(docs/cli.md, "Trusted actors, rules and the quarantine"). The checks themselves are
``trust.check_trust``'s; this module only turns the flags into the setting it takes and says the
refusals in terms of the flags.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from switchboard import trust as trusting
from switchboard.errors import SwitchboardError
from switchboard.plugins import Providers
from switchboard.provider import SourceKind

F = TypeVar("F", bound=Callable[..., Any])

FLAGS = "--trust/--login/--actor-id"


def trust_options(fn: F) -> F:
    """``--trust/--login/--actor-id ACTOR`` (repeatable, passed as ``actors``), ``--allow-all``
    (``allow_all``) and ``--match sender|author|both`` (``match``)."""
    fn = click.option(
        "--match",
        type=click.Choice(trusting.MATCH_MODES),
        help="Which actor must be listed: sender (the default), author, or both (github, gitea).",
    )(fn)
    fn = click.option(
        "--allow-all",
        "allow_all",
        is_flag=True,
        help="Trust every actor (explicit; not with a list).",
    )(fn)
    return click.option(
        "--trust",
        "--login",
        "--actor-id",
        "actors",
        metavar="ACTOR",
        multiple=True,
        help="Trust this actor (repeatable): a login for github/gitea, an actor id for cairn, "
        "linear, plain. The three names are the same option.",
    )(fn)


def trust_value(
    kind: SourceKind | None, actors: tuple[str, ...], allow_all: bool, match: str | None
) -> dict[str, Any] | None:
    """The trust setting the flags ask for (None: no flag given), in the shape ``check_trust``
    takes. Combinations that can only be a mistake are refused here, in the flags' words."""
    if allow_all:
        if actors or match is not None:
            raise SwitchboardError(
                "invalid_trust", f"--allow-all trusts everyone: give it alone, without {FLAGS} or --match"
            )
        return {"allow_all": True}
    if not actors:
        if match is not None:
            raise SwitchboardError(
                "invalid_trust",
                f"--match needs the actors it applies to ({FLAGS} ACTOR): the setting is replaced whole",
            )
        return None
    # A kind without actors refuses any setting (trust_not_supported) before reading its keys, so
    # the key used for it does not matter.
    field = kind.trust.field if kind is not None and kind.trust is not None else "logins"
    value: dict[str, Any] = {field: list(actors)}
    if match is not None:
        value["match"] = match
    return value


def in_flag_terms(exc: trusting.TrustError, source: str, kind: SourceKind | None) -> SwitchboardError:
    """A refusal of the trust step, said with the flags that fix it (the core's messages name the
    JSON keys the API takes)."""
    if exc.code == "trust_required" and kind is not None and kind.trust is not None:
        label = kind.trust.label
        return SwitchboardError(
            "trust_required",
            f"a {source} webhook must say whose deliveries may create work: give --trust ACTOR "
            f"(repeatable; {label}s) or --allow-all",
        )
    if exc.code == "trust_not_supported":
        return SwitchboardError(exc.code, f"{exc.message}; leave out {FLAGS}, --allow-all and --match")
    return exc


def described(providers: Providers, view: dict[str, Any]) -> str:
    """A webhook view's trust in one line (``trust.describe``), for a kind that takes one: the
    same judgement as ``intake_config.trust_view``, made on the view rather than the row."""
    kind = providers.sources.get(view["source"])
    if kind is None:
        return "unknown (no installed provider handles this kind)"
    signed = kind.secret != "none" and view["trust_mode"] == "signed"
    if not trusting.trust_needed(kind.trust, signed=signed):
        return "not available for this kind"
    return trusting.describe(kind.trust, view["trust"])
