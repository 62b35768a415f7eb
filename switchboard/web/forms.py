"""Reading posted forms, and the one way a refused form comes back to the person who sent it.

A handler that changes something either redirects (``see_other`` with a fixed notice key)
or raises a ``SwitchboardError``; ``shows_refusals`` turns the error into the family's page with
the message and the right 4xx status, and — for a create form — the typed values, never a secret.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from functools import wraps
from typing import TYPE_CHECKING, TypeVar
from urllib.parse import urlencode

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from switchboard.errors import SwitchboardError, invalid
from switchboard.sanitize import lone_surrogate
from switchboard.web.html import FormRefusal
from switchboard.web.once import Redirect

if TYPE_CHECKING:
    from switchboard.web.session import Viewer

FIELD_MAX = 16 * 1024
# Fields that may be longer: a webhook's routing rules (a JSON document of up to 32 expressions of
# 4 KiB each and 16 KiB of params). The UI's request body limit still bounds the whole form.
LONG_FIELDS = {"rules": 256 * 1024}
# Never written back into a page: secrets by name, and the CSRF token (the page adds a fresh one).
UNKEPT_FIELDS = frozenset({"secret", "token", "csrf"})

Handler = Callable[[web.Request, "Viewer"], Awaitable[web.StreamResponse]]
PageRenderer = Callable[[web.Request, "Viewer", FormRefusal | None], Awaitable[web.Response]]
Resource = TypeVar("Resource")


async def read_form(request: web.Request) -> dict[str, str]:
    """The posted fields (first value of each, text only); a body that is not a form is empty."""
    try:
        data = await request.post()
    except web.HTTPRequestEntityTooLarge:
        raise SwitchboardError("payload_too_large", "the form is larger than the server accepts") from None
    except (ValueError, UnicodeDecodeError, LookupError, HttpProcessingError):
        # A malformed urlencoded or multipart body (bad boundary, broken part headers, …), or a
        # charset Python does not know (LookupError), named by the request's Content-Type.
        raise invalid("the form could not be read") from None
    out: dict[str, str] = {}
    for key, value in data.items():
        if isinstance(value, str) and key not in out:
            # The name first: the refusals below name the field, and a page cannot carry a lone
            # surrogate (a utf-7 form's "+2AA-=…" made the error page itself fail with a 500).
            check_text(key, "a field name")
            limit = LONG_FIELDS.get(key, FIELD_MAX)
            if len(value) > limit:
                raise invalid(f"field {key!r} is longer than {limit} characters")
            out[key] = check_text(value, key)
    return out


def check_text(value: str, what: str) -> str:
    """Refuse NUL characters and lone surrogates up front: PostgreSQL cannot store or compare the
    one, no database can store the other, and no name, slug, id or secret we accept contains
    either."""
    if "\x00" in value:
        raise invalid(f"{what} contains a NUL character")
    if lone_surrogate(value):
        # As a form in utf-7 decodes "+2AA-": no database can store it.
        raise invalid(f"{what} is not valid text")
    return value


def check_request_text(request: web.Request) -> None:
    for key, value in [*request.match_info.items(), *request.query.items()]:
        check_text(value, key)


def int_field(form: Mapping[str, str], name: str, label: str, default: int | None) -> int | None:
    raw = form.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise invalid(f"{label} must be a whole number") from None


def list_field(form: Mapping[str, str], name: str) -> list[str] | None:
    """A comma- or line-separated list; ``None`` when it names nothing."""
    items = [p.strip() for p in form.get(name, "").replace("\n", ",").split(",") if p.strip()]
    return items or None


def see_other(location: str, done: str | None = None) -> web.HTTPSeeOther:
    """The 303 after a POST; ``done`` names the notice (``html.NOTICES``) the next page shows, once
    (it travels on the session's row: see ``once``)."""
    return Redirect(location, done)


def ask_first(request: web.Request, viewer: Viewer, keep: tuple[str, ...] = ()) -> None:
    """A destructive POST goes ahead only with its confirmation page's ``confirm=yes``; without it
    (a hand-made form, an old page) the browser is sent to that page, a GET on the same path with
    the ``keep`` fields (never a secret) in the query, and nothing changes."""
    if viewer.form.get("confirm") == "yes":
        return
    query = urlencode([(k, viewer.form[k]) for k in keep if k not in UNKEPT_FIELDS and viewer.form.get(k)])
    raise web.HTTPSeeOther(request.path + (f"?{query}" if query else ""))


def page_view(render: PageRenderer) -> Handler:
    """The GET handler of a family's page."""

    async def view(request: web.Request, viewer: Viewer) -> web.StreamResponse:
        return await render(request, viewer, None)

    view.__name__ = f"{render.__module__.rsplit('.', 1)[-1]}_view"
    return view


def shows_refusals(render: PageRenderer, *, create_form: bool = False) -> Callable[[Handler], Handler]:
    """A refused change (a ``SwitchboardError`` from the handler) comes back as the family's page
    with the message and its status. With ``create_form`` the handler is the page's create form:
    it comes back unfolded with what was typed, less the fields in ``UNKEPT_FIELDS``."""

    def decorate(handler: Handler) -> Handler:
        @wraps(handler)
        async def wrapper(request: web.Request, viewer: Viewer) -> web.StreamResponse:
            try:
                return await handler(request, viewer)
            except SwitchboardError as exc:
                form = None
                if create_form:
                    form = {k: v for k, v in viewer.form.items() if k not in UNKEPT_FIELDS}
                return await render(request, viewer, FormRefusal(exc.message, exc.http_status, form))

        return wrapper

    return decorate


def changes(
    render: PageRenderer,
    location: str,
    resolve: Callable[[web.Request, Viewer], Awaitable[Resource]],
    *,
    confirm: tuple[str, ...] | None = None,
) -> Callable[[Callable[[web.Request, Viewer, Resource], Awaitable[str]]], Handler]:
    """The shape of every POST on a resource named in the URL (rotate, delete, test, routes, …):
    ``resolve`` finds it and checks the viewer may change it (404 for another scope's, 403 for a
    read-only member), the decorated change does the work and returns a ``NOTICES`` key, and the
    browser is sent to ``location`` with that notice. A refusal comes back as ``render``'s page.
    With ``confirm`` (the fields its confirmation page keeps), the change is destructive: without
    the confirmation it is ``ask_first``."""

    def decorate(change: Callable[[web.Request, Viewer, Resource], Awaitable[str]]) -> Handler:
        @shows_refusals(render)
        @wraps(change)
        async def handler(request: web.Request, viewer: Viewer) -> web.StreamResponse:
            # Found and allowed first (another scope's is a 404 either way), then confirmed.
            resource = await resolve(request, viewer)
            if confirm is not None:
                ask_first(request, viewer, confirm)
            raise see_other(location, await change(request, viewer, resource))

        return handler

    return decorate
