"""``switchboard webhook``: ingest URLs and their signing secrets (minted ones printed once), whom each
webhook trusts (``trust``; chosen at ``create`` for kinds with actors), and each webhook's delivery
log: ``deliveries``, ``delivery``, ``redeliver`` and ``test``. Its routing rules are ``cli.rules``'s."""

from __future__ import annotations

from typing import Any

import click
from sqlalchemy import select

from switchboard import deliveries, intake_config, quarantine, tenancy
from switchboard.cli.group import main
from switchboard.cli.inputs import read_secret
from switchboard.cli.output import emit, json_option, table, when
from switchboard.cli.pages import page_options, with_hint
from switchboard.cli.runner import do
from switchboard.cli.trust import described, in_flag_terms, trust_options, trust_value
from switchboard.ingest_writer import IngestWriter
from switchboard.intake_config import Caller
from switchboard.models import Endpoint, Route
from switchboard.paging import Page, page_of
from switchboard.services import Services
from switchboard.trust import TrustError


@main.group("webhook")
def webhook_group() -> None:
    """Ingest URLs: one per source, owned by an endpoint, with a signing secret."""


@webhook_group.command("create")
@click.option(
    "--endpoint", "endpoint_slug", metavar="SLUG", required=True, help="The owning endpoint's slug."
)
@click.option(
    "--source",
    required=True,
    metavar="KIND",
    help="Source kind (github, gitea, slack, cairn, stripe, generic, …).",
)
@click.option("--queue", metavar="Q", help="Target queue on the endpoint (default: its first queue).")
@click.option(
    "--instance",
    metavar="HOST|URL",
    help="Pin it to the instance it serves (github: the host; gitea, cairn: the https base URL). "
    "Default: its first verified delivery with a reply address binds it.",
)
@trust_options
@json_option
def webhook_create(
    endpoint_slug: str,
    source: str,
    queue: str | None,
    instance: str | None,
    actors: tuple[str, ...],
    allow_all: bool,
    match: str | None,
    as_json: bool,
) -> None:
    """Create a webhook; print its ingest URL and, for minted kinds, its secret (shown once).

    A kind whose signed deliveries name people (github, gitea, cairn, linear, plain) needs the choice
    of whom to trust: --trust ACTOR (repeatable) or --allow-all; other kinds take neither."""

    async def go(services: Services) -> tuple[tenancy.NewWebhook, str, str]:
        kind = services.providers.sources.get(source)
        try:
            value = trust_value(kind, actors, allow_all, match)
            trust = intake_config.trust_for_create(services.providers, source, value)
        except TrustError as exc:
            raise in_flag_terms(exc, source, kind) from None
        new = await tenancy.create_webhook(
            services.db,
            services.vault,
            services.providers,
            endpoint_slug=endpoint_slug,
            source=source,
            queue=queue,
            instance=instance,
            trust=trust,
        )
        view = tenancy.webhook_view(new.webhook, endpoint_slug)
        return new, services.settings.base_url, described(services.providers, view)

    new, base_url, trusted = do(go, warn_plaintext=True)
    view = {**tenancy.webhook_view(new.webhook, endpoint_slug), "quarantined": 0, "trust_described": trusted}
    url = tenancy.ingest_url(base_url, new.ingest_token)
    data = {"webhook": view, "ingest_url": url, "secret": new.secret}

    def text_out() -> str:
        lines = [
            f"webhook {view['id']} ({view['source']} → {endpoint_slug}/{view['queue']}) created",
            f"ingest URL (shown once, store it now): {url}",
        ]
        if new.secret is not None:
            lines.append(f"signing secret (shown once, store it now): {new.secret}")
        elif view["secret_state"] == "awaiting":
            lines.append(
                f"awaiting the provider's signing secret: ingest answers 503 until you run "
                f"`switchboard webhook set-secret {view['id']}` (secret on stdin)"
            )
        else:
            lines.append("no signing secret: trust comes from the unguessable URL alone")
        if view["instance"]:
            lines.append(f"serves {view['instance']}: a delivery naming another instance gets no address")
        if view["trust"] is not None:
            lines.append(f"trust: {trusted}")
        return "\n".join(lines)

    emit(as_json, data, text_out)


async def _with_intake(services: Services, views: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Webhook views with their quarantined count and their trust in one line (``trust_described``)."""
    counted = await quarantine.with_quarantined(services.db, views)
    return [{**view, "trust_described": described(services.providers, view)} for view in counted]


def _intake_cells(w: dict[str, Any]) -> list[str]:
    return [
        f"trust: {w['trust_described']}",
        f"rules:{w['rules']}",
        f"quarantined:{w['quarantined']}",
    ]


@webhook_group.command("list")
@click.option("--endpoint", "endpoint_slug", metavar="SLUG", help="Only this endpoint's webhooks.")
@page_options()
@json_option
def webhook_list(
    endpoint_slug: str | None, before: str | None, after: str | None, limit: int, as_json: bool
) -> None:
    """List webhooks, oldest first (never a secret; the ingest token only as its prefix), with whom
    each trusts, its rule count and how many of its deliveries are quarantined."""

    async def go(services: Services) -> Page[dict[str, Any]]:
        if endpoint_slug is not None:
            await tenancy.get_endpoint(services.db, endpoint_slug)
        rows = await tenancy.list_webhooks(services.db, endpoint_slug)
        page = page_of(rows, lambda w: w["id"], before=before, after=after, limit=limit)
        # Counted for the page shown only: one grouped query.
        return Page(await _with_intake(services, page.rows), page.next_before, page.next_after)

    page = do(go)
    rows = page.rows
    emit(
        as_json,
        page.answer("webhooks", rows),
        lambda: with_hint(
            table(
                [
                    [
                        w["id"],
                        w["source"],
                        f"{w['endpoint']}/{w['queue']}",
                        w["trust_mode"],
                        f"secret:{w['secret_state']}",
                        w["ingest_token_prefix"],
                        f"routes:{','.join(w['routes'])}" if w["routes"] else "",
                        *_intake_cells(w),
                    ]
                    for w in rows
                ],
                "no webhooks",
            ),
            page,
        ),
    )


@webhook_group.command("show")
@click.argument("webhook_id")
@json_option
def webhook_show(webhook_id: str, as_json: bool) -> None:
    """One webhook: its target, secret state, instance, routes, whom it trusts, its rule count and
    how many of its deliveries are quarantined (never a secret)."""

    async def go(services: Services) -> dict[str, Any]:
        async with services.db.read() as s:
            webhook, endpoint = await intake_config.owned_webhook(s, Caller.cli(), webhook_id, manage=False)
            routes = await s.scalars(
                select(Endpoint.slug)
                .join(Route, Route.endpoint_id == Endpoint.id)
                .where(Route.webhook_id == webhook.id)
                .order_by(Route.created_at)
            )
            view = tenancy.webhook_view(webhook, endpoint.slug, list(routes.all()))
        return (await _with_intake(services, [view]))[0]

    w = do(go)

    def text_out() -> str:
        lines = [
            f"webhook {w['id']} ({w['source']} → {w['endpoint']}/{w['queue']})"
            + (f" {w['name']}" if w["name"] else ""),
        ]
        if w["description"]:
            lines.append(f"description: {w['description']}")
        lines += [
            f"trust mode: {w['trust_mode']}; secret: {w['secret_state']}; token {w['ingest_token_prefix']}",
            f"instance: {w['instance'] or 'not bound yet (its first delivery with an address binds it)'}",
            f"routes: {', '.join(w['routes']) if w['routes'] else 'none'}",
            f"trust: {w['trust_described']}",
            f"routing rules: {w['rules']}"
            + (f" (`switchboard webhook rules show {w['id']}`)" if w["rules"] else ""),
            f"quarantined: {w['quarantined']}"
            + (f" (`switchboard quarantine list --webhook {w['id']}`)" if w["quarantined"] else ""),
            f"created: {when(w['created_at'])}",
        ]
        if w["paused"]:
            lines.append(f"paused since {when(w['paused_at'])}: ingest answers 503")
        if w["previous_secret_expires_at"]:
            lines.append(f"the previous secret verifies until {when(w['previous_secret_expires_at'])}")
        return "\n".join(lines)

    emit(as_json, {"webhook": w}, text_out)


@webhook_group.command("trust")
@click.argument("webhook_id")
@trust_options
@json_option
def webhook_trust(
    webhook_id: str, actors: tuple[str, ...], allow_all: bool, match: str | None, as_json: bool
) -> None:
    """Show whom WEBHOOK_ID trusts, or replace it: --login/--actor-id ACTOR (repeatable) with
    --match, or --allow-all. Applies from the next delivery; untrusted deliveries are quarantined."""

    async def go(services: Services) -> dict[str, Any]:
        caller = Caller.cli()
        if not actors and not allow_all and match is None:
            return await intake_config.show_trust(services, caller, webhook_id)
        webhook = await tenancy.get_webhook(services.db, webhook_id)
        value = trust_value(services.providers.sources.get(webhook.source), actors, allow_all, match)
        return await intake_config.set_trust(services, caller, webhook_id, value)

    view = do(go)
    saved = "trust saved: " if actors or allow_all else ""
    shown = view["described"] if view["supported"] else f"trusted actors are {view['described']}"
    emit(as_json, view, f"webhook {webhook_id}: {saved}{shown}")


@webhook_group.command("rotate")
@click.argument("webhook_id")
@json_option
def webhook_rotate(webhook_id: str, as_json: bool) -> None:
    """Mint a new signing secret (github, gitea, cairn); print it once. The old one keeps verifying
    for SWITCHBOARD_SECRET_OVERLAP_SECONDS (default 24 h), then stops working."""

    async def go(services: Services) -> str:
        return await tenancy.rotate_webhook_secret(
            services.db,
            services.vault,
            services.providers,
            webhook_id,
            overlap_seconds=services.settings.secret_overlap_seconds,
        )

    secret = do(go, warn_plaintext=True)
    emit(
        as_json,
        {"webhook": webhook_id, "secret": secret},
        f"webhook {webhook_id}: new signing secret (shown once, store it now): {secret}",
    )


@webhook_group.command("set-secret")
@click.argument("webhook_id")
@json_option
def webhook_set_secret(webhook_id: str, as_json: bool) -> None:
    """Set the provider-issued signing secret (slack, stripe), read from stdin or a hidden prompt."""
    secret = read_secret("Provider signing secret")

    async def go(services: Services) -> dict[str, Any]:
        webhook = await tenancy.set_webhook_secret(
            services.db,
            services.vault,
            services.providers,
            webhook_id,
            secret,
            overlap_seconds=services.settings.secret_overlap_seconds,
        )
        return {"id": webhook.id, "secret_state": webhook.secret_state}

    view = do(go, warn_plaintext=True)
    emit(as_json, {"webhook": view}, f"webhook {webhook_id}: signing secret set; ingest is open")


@webhook_group.command("delete")
@click.argument("webhook_id")
@json_option
def webhook_delete(webhook_id: str, as_json: bool) -> None:
    """Delete a webhook: its ingest URL stops answering (received events and todos are kept)."""

    async def go(services: Services) -> None:
        await tenancy.delete_webhook(services.db, webhook_id)

    do(go)
    emit(as_json, {"webhook": webhook_id, "deleted": True}, f"webhook {webhook_id} deleted")


def _delivery_line(d: dict[str, Any]) -> list[str]:
    what = d["disposition"] + (f":{d['reason']}" if d["reason"] else "")
    if d["count"] > 1:
        what += f" (x{d['count']})"
    marks = []
    if d["redelivery_of"]:
        marks.append(f"redelivery of {d['redelivery_of']}")
    if d["original"]:
        marks.append(f"duplicate of {d['original']}")
    todos = ",".join(t["id"] for t in d["todos"])
    return [
        d["id"],
        d["received_at"] or "",
        str(d["status"]),
        what,
        d["event"] or "",
        d["delivery_key"] or "",
        {True: "verified", False: "unverified", None: ""}[d["verified"]],
        f"todos:{todos}" if todos else "",
        "; ".join(marks),
    ]


@webhook_group.command("deliveries")
@click.argument("webhook_id")
@page_options(default=50)
@json_option
def webhook_deliveries(
    webhook_id: str, before: str | None, after: str | None, limit: int, as_json: bool
) -> None:
    """The webhook's delivery log, newest first: stored deliveries with their todos, refusals
    (status and reason) and duplicates. Times are UTC."""

    async def go(services: Services) -> Any:
        await tenancy.get_webhook(services.db, webhook_id)
        return await deliveries.list_deliveries(
            services.db, webhook_id, before=before, after=after, limit=limit
        )

    page = do(go)
    emit(
        as_json,
        page.answer("deliveries", page.rows),
        lambda: with_hint(table([_delivery_line(d) for d in page.rows], "no deliveries"), page),
    )


@webhook_group.command("delivery")
@click.argument("webhook_id")
@click.argument("delivery_id")
@json_option
def webhook_delivery(webhook_id: str, delivery_id: str, as_json: bool) -> None:
    """One delivery: its row, redacted headers and (with --json, base64) the raw body."""

    async def go(services: Services) -> dict[str, Any]:
        return await deliveries.delivery_detail(services.db, webhook_id, delivery_id)

    d = do(go)

    def text_out() -> str:
        lines = [" ".join(part for part in _delivery_line(d) if part), f"detail: {d['detail']}"]
        lines += [f"header {name}: {value}" for name, value in d["headers"].items()]
        if d["stored"]:
            lines.append(f"body: {d['body_bytes']} bytes, sha256 {d['body_sha256']} (--json: body_base64)")
        return "\n".join(lines)

    emit(as_json, {"delivery": d}, text_out)


async def _made(services: Services, make: Any) -> deliveries.Made:
    # Through ingest's own group-commit writer, as the server stores a delivery.
    writer = IngestWriter(services)
    try:
        made: deliveries.Made = await make(writer)
    finally:
        await writer.close()
    return made


def _made_text(made: deliveries.Made) -> str:
    what = f"redelivery of {made.redelivery_of}" if made.redelivery_of else "test delivery"
    todos = ", ".join(made.todos) if made.todos else "no todo"
    return f"{what}: delivery {made.event_id} {made.disposition}; {todos}"


@webhook_group.command("redeliver")
@click.argument("webhook_id")
@click.argument("event_id")
@json_option
def webhook_redeliver(webhook_id: str, event_id: str, as_json: bool) -> None:
    """Run a stored delivery through ingest again as a new delivery, marked as a redelivery of it:
    the webhook's routes as they are now decide, and it mints NEW todos (its key is
    redelivery:<event>:<n>, so it never counts as the original's duplicate)."""

    async def go(services: Services) -> deliveries.Made:
        return await _made(
            services, lambda w: deliveries.redeliver(services, w, webhook_id, event_id, by="the command line")
        )

    made = do(go)
    emit(as_json, deliveries.made_view(made), _made_text(made))


@webhook_group.command("test")
@click.argument("webhook_id")
@json_option
def webhook_test(webhook_id: str, as_json: bool) -> None:
    """Send the kind's signed hello through ingest (github, gitea, cairn: a ping, stored as
    ignored; generic: switchboard.test, routed to a todo); other kinds cannot."""

    async def go(services: Services) -> deliveries.Made:
        return await _made(
            services, lambda w: deliveries.send_test(services, w, webhook_id, by="the command line")
        )

    made = do(go)
    emit(as_json, deliveries.made_view(made), _made_text(made))
