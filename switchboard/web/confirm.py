"""The confirmation step before every destructive action (revoke, delete, rotate, remove, end): a
GET page that changes nothing and says what will happen, with the one POST form that does it.

No JavaScript: the list pages link to these pages (``confirm_link``); the page's form carries
``confirm=yes``, and a POST without it is sent back here (``forms.ask_first``).
"""

from __future__ import annotations

from aiohttp import web

from switchboard.web.html import EMPTY, Safe, h, hidden, join, page, post_form
from switchboard.web.session import Viewer


def confirm_link(href: str, label: str, cls: str = "danger") -> Safe:
    """The list page's button for a destructive action: a link to its confirmation page."""
    return h('<a class="button {cls}" href="{u}">{label}…</a>', cls=cls, u=href, label=label)


def confirm_page(
    viewer: Viewer,
    *,
    question: str,
    explain: Safe,
    action: str,
    button: str,
    back: str,
    active: str,
    fields: Safe = EMPTY,
    cls: str = "danger",
) -> web.Response:
    """``question`` as the heading, ``explain`` (what happens, what cannot be undone), and the form
    that does it; "No" goes back to ``back`` and changes nothing."""
    form = post_form(
        viewer,
        action,
        "confirm",
        join(
            [
                fields,
                hidden("confirm", "yes"),
                h(
                    '<p><button type="submit" class="{cls}">{b}</button> '
                    '<a href="{back}">No, go back</a></p>',
                    cls=cls,
                    b=button,
                    back=back,
                ),
            ]
        ),
    )
    body = h(
        '<h1>{q}</h1><section class="card confirm">{explain}{form}</section>',
        q=question,
        explain=explain,
        form=form,
    )
    return page(question, body, viewer, active=active)
