"""``/webhooks``: the endpoints' inbound webhooks and their routes (fan-out to more endpoints).

A webhook belongs to its endpoint's scope. The ingest URL, and the signing secret for the kinds
Switchboard mints, are in the create/rotate response only; provider-issued secrets (slack, stripe)
are set with ``PUT /webhooks/{id}/secret`` and never shown. A route into another scope needs the
consent of that scope's administrators; either side may withdraw it: the target side by the
route's id (``/routes``), learning nothing about the webhook's side.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from switchboard import quarantine, routes, tenancy, webhook_ops
from switchboard.api.endpoints import visible_endpoint
from switchboard.api.intake import trust_param
from switchboard.api.openapi import TIMESTAMP, deleted, list_of, obj, ref
from switchboard.api.routing import TEAM_QUERY, Operation, Param, Request, page_query, paged
from switchboard.errors import not_found
from switchboard.intake_config import trust_for_create
from switchboard.models import Endpoint, Webhook
from switchboard.tenancy import Owner


async def _webhook(req: Request, webhook_id: str) -> tuple[Webhook, Endpoint]:
    async with req.services.db.read() as s:
        found = (
            await s.execute(
                select(Webhook, Endpoint)
                .join(Endpoint, Webhook.endpoint_id == Endpoint.id)
                .where(Webhook.id == webhook_id)
            )
        ).first()
    if found is None or not req.caller.sees(Owner.of(found[1])):
        raise not_found(f"webhook {webhook_id!r}")
    return found[0], found[1]


async def _webhook_view(req: Request, webhook_id: str, endpoint: Endpoint) -> dict[str, Any]:
    for row in await tenancy.list_webhooks(req.services.db, endpoint.slug):
        if row["id"] == webhook_id:
            return (await quarantine.with_quarantined(req.services.db, [row]))[0]
    raise not_found(f"webhook {webhook_id!r}")


async def list_webhooks(req: Request) -> tuple[int, dict[str, Any]]:
    slug = req.query.get("endpoint")
    scopes = req.caller.read_scopes(req.query.get("team"))
    if slug is not None:
        endpoint = await visible_endpoint(req, slug)
        if Owner.of(endpoint) not in scopes:  # both filters given, and they disagree
            raise not_found(f"endpoint {slug!r}")
        rows = await tenancy.list_webhooks(req.services.db, slug)
    else:
        rows = []
        for scope in scopes:
            rows += await tenancy.list_webhooks(req.services.db, owner=scope)
    page = paged(req, "webhooks", rows, lambda w: w["id"], lambda w: w)
    # Counted for the page shown only: one grouped query, however many webhooks the scopes hold.
    page["webhooks"] = await quarantine.with_quarantined(req.services.db, page["webhooks"])
    return 200, page


async def create_webhook(req: Request) -> tuple[int, dict[str, Any]]:
    endpoint = await visible_endpoint(req, req.body["endpoint"])
    req.caller.require_manage(Owner.of(endpoint), f"endpoint {endpoint.slug!r}")
    services = req.services
    # A kind whose signed deliveries name people needs the choice of whom to trust: no default
    # (docs/routing.md, "Trusted actors"); other kinds refuse one.
    trust = trust_for_create(services.providers, req.body["source"], req.body.get("trust"))
    new = await tenancy.create_webhook(
        services.db,
        services.vault,
        services.providers,
        endpoint_slug=endpoint.slug,
        source=req.body["source"],
        queue=req.body.get("queue"),
        instance=req.body.get("instance"),
        name=req.body.get("name"),
        description=req.body.get("description"),
        trust=trust,
    )
    return 201, {
        "webhook": {**tenancy.webhook_view(new.webhook, endpoint.slug), "quarantined": 0},
        "ingest_url": tenancy.ingest_url(services.settings.base_url, new.ingest_token),
        "secret": new.secret,
    }


async def get_webhook(req: Request) -> tuple[int, dict[str, Any]]:
    webhook, endpoint = await _webhook(req, req.path["id"])
    return 200, {"webhook": await _webhook_view(req, webhook.id, endpoint)}


async def rotate_webhook(req: Request) -> tuple[int, dict[str, Any]]:
    webhook, endpoint = await _webhook(req, req.path["id"])
    req.caller.require_manage(Owner.of(endpoint), f"webhook {webhook.id!r}")
    services = req.services
    secret = await tenancy.rotate_webhook_secret(
        services.db,
        services.vault,
        services.providers,
        webhook.id,
        overlap_seconds=services.settings.secret_overlap_seconds,
    )
    return 200, {"webhook": await _webhook_view(req, webhook.id, endpoint), "secret": secret}


async def set_webhook_secret(req: Request) -> tuple[int, dict[str, Any]]:
    webhook, endpoint = await _webhook(req, req.path["id"])
    req.caller.require_manage(Owner.of(endpoint), f"webhook {webhook.id!r}")
    services = req.services
    await tenancy.set_webhook_secret(
        services.db,
        services.vault,
        services.providers,
        webhook.id,
        req.body["secret"],
        overlap_seconds=services.settings.secret_overlap_seconds,
    )
    return 200, {"webhook": await _webhook_view(req, webhook.id, endpoint)}


async def patch_webhook(req: Request) -> tuple[int, dict[str, Any]]:
    webhook, endpoint = await _webhook(req, req.path["id"])
    req.caller.require_manage(Owner.of(endpoint), f"webhook {webhook.id!r}")
    changes: dict[str, Any] = {k: req.body[k] for k in ("name", "description") if k in req.body}
    await webhook_ops.update_webhook(req.services.db, webhook.id, paused=req.body.get("paused"), **changes)
    return 200, {"webhook": await _webhook_view(req, webhook.id, endpoint)}


async def expire_previous_secret(req: Request) -> tuple[int, dict[str, Any]]:
    webhook, endpoint = await _webhook(req, req.path["id"])
    req.caller.require_manage(Owner.of(endpoint), f"webhook {webhook.id!r}")
    _, was_live = await webhook_ops.expire_previous_secret(req.services.db, webhook.id)
    return 200, {"webhook": await _webhook_view(req, webhook.id, endpoint), "expired": was_live}


async def delete_webhook(req: Request) -> tuple[int, dict[str, Any]]:
    webhook, endpoint = await _webhook(req, req.path["id"])
    req.caller.require_manage(Owner.of(endpoint), f"webhook {webhook.id!r}")
    await tenancy.delete_webhook(req.services.db, webhook.id)
    return 200, {"webhook": webhook.id, "deleted": True}


async def add_route(req: Request) -> tuple[int, dict[str, Any]]:
    webhook, endpoint = await _webhook(req, req.path["id"])
    req.caller.require_manage(Owner.of(endpoint), f"webhook {webhook.id!r}")
    target = await visible_endpoint(req, req.body["endpoint"])
    # Consent of the target's scope: the caller must administer it too (tenancy checks both).
    route = await tenancy.add_route(
        req.services.db, webhook.id, target.slug, consenting_human_id=req.caller.human.id
    )
    return 201, {
        "route": {"id": route.id, "webhook": webhook.id, "endpoint": target.slug},
        "webhook": await _webhook_view(req, webhook.id, endpoint),
    }


async def _removed(req: Request, row: routes.RouteRow) -> tuple[int, dict[str, Any]]:
    """The answer to a removal: the route, and the webhook as it is now only for a caller who can
    see the webhook (the target side learns nothing of the other side)."""
    shows = req.caller.sees(Owner.of(row.source))
    out: dict[str, Any] = {"route": routes.route_view(row, show_source=shows), "removed": True}
    if shows:
        out["webhook"] = await _webhook_view(req, row.webhook.id, row.source)
    return 200, out


async def remove_route(req: Request) -> tuple[int, dict[str, Any]]:
    # Either side may withdraw: the webhook's administrators, or the target scope's (its consent).
    row = await routes.remove_route(
        req.services.db, req.path["id"], req.path["endpoint"], human_id=req.caller.human.id
    )
    return await _removed(req, row)


async def remove_route_by_id(req: Request) -> tuple[int, dict[str, Any]]:
    row = await routes.remove_route_by_id(req.services.db, req.path["id"], human_id=req.caller.human.id)
    return await _removed(req, row)


async def list_routes(req: Request) -> tuple[int, dict[str, Any]]:
    """Routes into the caller's endpoints; the webhook's side only where the caller can see it."""
    rows = await routes.list_routes(req.services.db, into=req.caller.read_scopes(req.query.get("team")))
    return 200, paged(
        req,
        "routes",
        rows,
        lambda r: r.route.id,
        lambda r: routes.route_view(r, show_source=req.caller.sees(Owner.of(r.source))),
    )


# The longest instance and provider secret ``tenancy`` takes (``instances.normalize_instance``,
# ``tenancy.set_webhook_secret``), stated in the document: refused beyond them.
INSTANCE_MAX, SECRET_MAX = 300, 512

# A webhook's name and description, on create and change: refused beyond their length, never cut.
_LABELS = (
    Param("name", "string", "What you call it (optional).", max_length=tenancy.WEBHOOK_NAME_MAX),
    Param("description", "string", "What it is for (optional).", max_length=tenancy.WEBHOOK_DESCRIPTION_MAX),
)

OPERATIONS: tuple[Operation, ...] = (
    Operation(
        "GET",
        "/webhooks",
        "listWebhooks",
        "Webhooks in the caller's scopes (never a secret), oldest first, one cursor page.",
        "webhooks",
        list_webhooks,
        "WebhookList",
        query=(TEAM_QUERY, Param("endpoint", "string", "Only this endpoint's webhooks."), *page_query()),
    ),
    Operation(
        "POST",
        "/webhooks",
        "createWebhook",
        "Create a webhook. The ingest URL, and the secret for minted kinds, are in this response only; "
        "provider-issued kinds (slack, stripe) await PUT /webhooks/{id}/secret.",
        "webhooks",
        create_webhook,
        "CreatedWebhook",
        status=201,
        errors=(400, 401, 403, 404, 409),
        body=(
            Param("endpoint", "string", "The owning endpoint's slug.", required=True),
            Param(
                "source",
                "string",
                "Source kind (github, gitea, slack, cairn, stripe, generic, …).",
                required=True,
            ),
            Param("queue", "string", "Target queue (default: the endpoint's first)."),
            Param(
                "instance",
                "string",
                "Pin the webhook to the instance it serves (github: the host, e.g. ghes.example.com; "
                "gitea, cairn: the https base URL, path included). Default: bound by its first "
                "verified delivery with a reply address.",
                max_length=INSTANCE_MAX,
            ),
            *_LABELS,
            trust_param(
                "Trusted actors, required for kinds whose signed deliveries name people (GET /kinds: "
                '`trust`): `{"allow_all": true}` or the kind\'s list, e.g. `{"logins": ["octocat"], '
                '"match": "sender"}`. Refused on other kinds.',
                required=False,
            ),
        ),
        description="Refusals (400) besides `invalid_argument`: `trust_required` (a kind with actors and "
        "no `trust`), `trust_not_supported` (`trust` on a kind without actors or unsigned), "
        "`invalid_trust` (its shape or an entry).",
    ),
    Operation(
        "GET",
        "/webhooks/{id}",
        "getWebhook",
        "One webhook (never its secret).",
        "webhooks",
        get_webhook,
        "WebhookEnvelope",
    ),
    Operation(
        "PATCH",
        "/webhooks/{id}",
        "updateWebhook",
        "Name or describe a webhook (null or empty clears), or pause it (`paused: true`: ingest answers "
        "503 with Retry-After and stores nothing) and resume it; absent fields are unchanged.",
        "webhooks",
        patch_webhook,
        "WebhookEnvelope",
        errors=(400, 401, 403, 404),
        body=(
            Param("name", "string", "What you call it.", nullable=True, max_length=tenancy.WEBHOOK_NAME_MAX),
            Param(
                "description",
                "string",
                "What it is for.",
                nullable=True,
                max_length=tenancy.WEBHOOK_DESCRIPTION_MAX,
            ),
            Param("paused", "boolean", "true pauses, false resumes."),
        ),
    ),
    Operation(
        "DELETE",
        "/webhooks/{id}",
        "deleteWebhook",
        "Delete a webhook.",
        "webhooks",
        delete_webhook,
        "WebhookDeleted",
        errors=(400, 401, 403, 404),
    ),
    Operation(
        "POST",
        "/webhooks/{id}/rotate",
        "rotateWebhookSecret",
        "Mint a new signing secret (minted kinds); it is in this response only. The secret it replaces "
        "still verifies until `previous_secret_expires_at` (SWITCHBOARD_SECRET_OVERLAP_SECONDS).",
        "webhooks",
        rotate_webhook,
        "RotatedWebhook",
        errors=(400, 401, 403, 404),
    ),
    Operation(
        "POST",
        "/webhooks/{id}/expire-previous-secret",
        "expirePreviousWebhookSecret",
        "End the overlap now: only the current signing secret verifies from this answer on (after a "
        "leak). `expired` says whether an old secret was still accepted.",
        "webhooks",
        expire_previous_secret,
        "PreviousSecretExpired",
        errors=(400, 401, 403, 404),
    ),
    Operation(
        "PUT",
        "/webhooks/{id}/secret",
        "setWebhookSecret",
        "Set the provider-issued signing secret (slack, stripe); a replaced one still verifies until "
        "`previous_secret_expires_at`.",
        "webhooks",
        set_webhook_secret,
        "WebhookEnvelope",
        errors=(400, 401, 403, 404),
        body=(
            Param("secret", "string", "The provider's signing secret.", required=True, max_length=SECRET_MAX),
        ),
    ),
    Operation(
        "POST",
        "/webhooks/{id}/routes",
        "addWebhookRoute",
        "Fan deliveries out to another endpoint too; into another scope the caller must administer both.",
        "webhooks",
        add_route,
        "RouteEnvelope",
        status=201,
        errors=(400, 401, 403, 404, 409),
        body=(Param("endpoint", "string", "The target endpoint's slug.", required=True),),
    ),
    Operation(
        "DELETE",
        "/webhooks/{id}/routes/{endpoint}",
        "removeWebhookRoute",
        "Stop fanning out to an endpoint (administrators of either scope). The webhook as it is now "
        "is in the answer only for a caller who can see it.",
        "webhooks",
        remove_route,
        "RouteRemoved",
        errors=(400, 401, 403, 404),
    ),
    Operation(
        "GET",
        "/routes",
        "listRoutes",
        "Routes into the caller's endpoints. A route from a webhook the caller cannot see names "
        "nothing of that side (`webhook` is null).",
        "webhooks",
        list_routes,
        "RouteList",
        query=(TEAM_QUERY, *page_query()),
    ),
    Operation(
        "DELETE",
        "/routes/{id}",
        "removeRoute",
        "Remove a route by its id: administrators of either end (the target side withdraws its "
        "consent this way, without learning anything about the webhook's side).",
        "webhooks",
        remove_route_by_id,
        "RouteRemoved",
        errors=(400, 401, 403, 404),
    ),
)

SCHEMAS: dict[str, Any] = {
    "Webhook": obj(
        {
            "id": {"type": "string"},
            "endpoint": {"type": "string"},
            "source": {"type": "string"},
            "queue": {"type": "string"},
            "trust_mode": {"type": "string", "enum": ["signed", "token"]},
            "secret_state": {"type": "string", "enum": ["set", "awaiting", "none"]},
            "instance": {
                "type": ["string", "null"],
                "description": "The instance it serves; a delivery naming another gets no reply address.",
            },
            "ingest_token_prefix": {"type": "string"},
            "routes": {"type": "array", "items": {"type": "string"}},
            "created_at": TIMESTAMP,
            "secret_rotated_at": TIMESTAMP,
            "name": {"type": ["string", "null"]},
            "description": {"type": ["string", "null"]},
            "paused": {
                "type": "boolean",
                "description": "Paused: ingest answers 503 with Retry-After and stores nothing.",
            },
            "paused_at": TIMESTAMP,
            "previous_secret_expires_at": {
                **TIMESTAMP,
                "description": "Until then the secret the last rotation replaced still verifies; null: "
                "none does.",
            },
            "trust": {
                "type": ["object", "null"],
                "description": "Its trusted actors (GET /webhooks/{id}/trust); null: none set (a kind "
                "with actors then quarantines every delivery; kinds without actors take none).",
            },
            "rules": {"type": "integer", "description": "How many routing rules it has."},
            "quarantined": {"type": "integer", "description": "How many of its deliveries are held."},
        },
        [
            "id",
            "endpoint",
            "source",
            "queue",
            "trust_mode",
            "secret_state",
            "instance",
            "ingest_token_prefix",
            "routes",
            "created_at",
            "secret_rotated_at",
            "name",
            "description",
            "paused",
            "paused_at",
            "previous_secret_expires_at",
            "trust",
            "rules",
            "quarantined",
        ],
    ),
    "WebhookDeleted": deleted("webhook", "webhook's id"),
    "PreviousSecretExpired": obj(
        {
            "webhook": ref("Webhook"),
            "expired": {"type": "boolean", "description": "Whether an old secret was still accepted."},
        },
        ["webhook", "expired"],
    ),
    "WebhookEnvelope": obj({"webhook": ref("Webhook")}, ["webhook"]),
    "WebhookList": list_of("webhooks", "Webhook"),
    "CreatedWebhook": obj(
        {
            "webhook": ref("Webhook"),
            "ingest_url": {"type": "string", "description": "Shown only here."},
            "secret": {
                "type": ["string", "null"],
                "description": "whsec_… for minted kinds — shown only here.",
            },
        },
        ["webhook", "ingest_url", "secret"],
    ),
    "RotatedWebhook": obj(
        {"webhook": ref("Webhook"), "secret": {"type": "string", "description": "Shown only here."}},
        ["webhook", "secret"],
    ),
    "Route": obj(
        {
            "id": {"type": "string"},
            "endpoint": {"type": "string", "description": "The target endpoint."},
            "queue": {"type": "string", "description": "The queue its todos arrive in."},
            "created_at": TIMESTAMP,
            "webhook": {
                "type": ["string", "null"],
                "description": "The webhook's id; null when the caller cannot see the webhook's scope.",
            },
            "source": {"type": "string", "description": "Only when the webhook is visible."},
            "webhook_endpoint": {"type": "string", "description": "Only when the webhook is visible."},
        },
        ["id", "endpoint", "queue", "created_at", "webhook"],
    ),
    "RouteList": list_of("routes", "Route"),
    "RouteRemoved": obj(
        {
            "route": ref("Route"),
            "removed": {"type": "boolean"},
            "webhook": {**ref("Webhook"), "description": "Only when the caller can see the webhook."},
        },
        ["route", "removed"],
    ),
    "RouteEnvelope": obj(
        {
            "route": obj(
                {"id": {"type": "string"}, "webhook": {"type": "string"}, "endpoint": {"type": "string"}}
            ),
            "webhook": ref("Webhook"),
        },
        ["route"],
    ),
}
