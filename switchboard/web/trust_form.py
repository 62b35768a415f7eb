"""The trusted-actors fields (docs/routing.md, "Trusted actors"): on the create-webhook form, where the
choice is required for kinds with actors and refused for the others, and on a webhook's page, where
it replaces the setting.

A radio button says which: **only these actors** (the list, and for kinds that offer it the match
mode) or **allow all**. Nothing is preselected on the create form: there is no silent default. The
setting is checked by ``trust.check_trust`` through ``intake_config`` exactly as the API and the CLI
check it; this module only turns the fields into the value it takes, refusing here only what can
only be a mistake in the form (allow all with a list typed next to it).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from switchboard import trust as trusting
from switchboard.plugins import Providers
from switchboard.provider import SourceKind, TrustSpec
from switchboard.web.html import EMPTY, Safe, dropdown, flag, h, hint, join, same

LIST, ALLOW_ALL = "list", "allow_all"
_SPLIT = re.compile(r"[\s,]+")
ONLY_THESE = "Only these actors: anyone else's deliveries are held in quarantine"


def kinds_with_actors(providers: Providers) -> list[tuple[str, TrustSpec]]:
    """The installed kinds whose webhooks need a trust choice (signed, with actors), by name."""
    return [
        (name, kind.trust)
        for name, kind in sorted(providers.sources.items())
        if kind.trust is not None and trusting.trust_needed(kind.trust, signed=kind.secret != "none")
    ]


def _radio(value: str, label: Safe | str, chosen: str | None, id_: str) -> Safe:
    return h(
        '<label class="check"><input type="radio" id="{id}" name="trust" value="{v}"{c}> '
        "<span>{label}</span></label>",
        id=id_,
        v=value,
        c=flag(chosen == value, "checked"),
        label=label,
    )


def trust_fields(
    form: Mapping[str, str],
    *,
    label: str,
    matches: Iterable[str],
    note: Safe | str,
    legend: str = "Trusted actors",
    offer_none: bool = False,
) -> Safe:
    """The fields, filled from ``form`` (a refused form's values, or the current setting as
    ``setting_form`` gives it); ``label`` names what the list holds ("GitHub logins").
    ``offer_none``: the create form's third choice, for kinds without actors."""
    chosen = form.get("trust")
    modes = list(matches)
    match = (
        h(
            '<label for="match">Match</label>{d}',
            d=dropdown("match", same(modes), form.get("match") or modes[0], id_="match"),
        )
        if len(modes) > 1
        else EMPTY
    )
    none = (
        _radio("", "None: this kind's deliveries name no actors", chosen, "trust-none")
        if offer_none
        else EMPTY
    )
    return h(
        '<fieldset class="trust"><legend>{legend}</legend>{note}'
        "{only}"
        '<label for="actors">{label} (separated by commas, spaces or lines)</label>'
        '<textarea id="actors" name="actors" rows="3" spellcheck="false">{actors}</textarea>{match}'
        "{all}{none}</fieldset>",
        legend=legend,
        note=hint(note),
        only=_radio(LIST, ONLY_THESE, chosen, "trust-list"),
        label=label,
        actors=form.get("actors", ""),
        match=match,
        all=_radio(ALLOW_ALL, "Allow all: every sender's deliveries become work", chosen, "trust-all"),
        none=none,
    )


def create_fields(providers: Providers, form: Mapping[str, str]) -> Safe:
    """The create form's trust fields, saying which kinds need them and what each one lists."""
    kinds = kinds_with_actors(providers)
    need = "; ".join(f"{name}: {spec.label}s" for name, spec in kinds)
    modes: list[str] = []
    for _, spec in kinds:
        modes += [m for m in spec.matches if m not in modes]
    return trust_fields(
        form,
        label="Logins or actor ids",
        matches=modes or ["sender"],
        note=f"Required for kinds whose signed deliveries name people ({need or 'none installed'}): "
        "choose whose deliveries may create work. Match (GitHub, Gitea): sender, the author of the "
        "comment, review, pull request or issue, or both. Other kinds take no trusted actors.",
        offer_none=True,
    )


def setting_form(spec: TrustSpec, setting: Any) -> dict[str, str]:
    """The fields that show a stored setting (an unreadable one shows as no choice)."""
    if not isinstance(setting, Mapping):
        return {}
    if setting.get("allow_all") is True:
        return {"trust": ALLOW_ALL}
    entries = setting.get(spec.field)
    if not isinstance(entries, list):
        return {}
    return {
        "trust": LIST,
        "actors": "\n".join(str(e) for e in entries),
        "match": str(setting.get("match") or spec.matches[0]),
    }


def trust_value(kind: SourceKind | None, form: Mapping[str, str]) -> dict[str, Any] | None:
    """The setting the fields ask for, in ``check_trust``'s shape; None when nothing was chosen
    (``trust_required`` for a kind with actors, which ``intake_config`` says)."""
    choice = form.get("trust", "")
    actors = [a for a in _SPLIT.split(form.get("actors", "")) if a]
    if choice == ALLOW_ALL:
        if actors:
            raise trusting.TrustError(
                "invalid_trust",
                "allow all trusts everyone: clear the list of actors, or choose only these actors",
            )
        return {"allow_all": True}
    if choice not in ("", LIST):
        raise trusting.TrustError("invalid_trust", "choose only these actors or allow all")
    if choice == "" and not actors:
        return None
    # A kind without actors refuses any setting (trust_not_supported) before reading its keys.
    field = kind.trust.field if kind is not None and kind.trust is not None else "logins"
    value: dict[str, Any] = {field: actors}
    if form.get("match"):
        value["match"] = form["match"]
    return value


def shown_list(spec: TrustSpec, setting: Any) -> Safe:
    """The trusted entries, one badge each (the described line cuts at five)."""
    entries = setting.get(spec.field) if isinstance(setting, Mapping) else None
    if not isinstance(entries, list):
        return EMPTY
    return h('<p class="actors">{b}</p>', b=join(h('<span class="badge">{e}</span> ', e=e) for e in entries))
