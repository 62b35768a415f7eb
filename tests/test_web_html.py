"""The web UI's markup layer on its own: the escaping rule and the widgets every page is built from.

These are the guarantees the pages rely on (tests/test_web.py checks them again through real pages):
interpolated text is escaped, only markup the package wrote passes through, a secret input never
carries a value, and non-web URLs never become links.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from switchboard.web.html import (
    EMPTY,
    Safe,
    action_form,
    card_form,
    checkbox,
    dropdown,
    field,
    h,
    join,
    link_if_web,
    secret_field,
    table,
)

HOSTILE = '"><script>alert(1)</script><img src=x onerror=alert(2)>'


@dataclass
class FakeViewer:
    """What the widgets read from a viewer: the handle and the session's CSRF token."""

    handle: str = "ada"
    csrf: str = "csrf-token-value"


def test_h_escapes_every_value_but_safe_markup() -> None:
    out = h('<p title="{t}">{body}{ok}</p>', t=HOSTILE, body=HOSTILE, ok=Safe("<b>ours</b>"))
    assert "<script" not in out and "<img" not in out
    assert out.count("&quot;&gt;&lt;script&gt;") == 2  # in the attribute and in the text
    assert "<b>ours</b>" in out
    assert isinstance(out, Safe)
    # Escaped output is Safe, so composing never escapes twice.
    assert h("{x}", x=h("{y}", y="a&b")) == "a&amp;b"
    assert join(["a<b", Safe("<i>c</i>"), None, 3]) == "a&lt;b<i>c</i>3"


def test_a_plain_str_subclass_is_not_safe() -> None:
    class Sneaky(str):
        pass

    assert h("{x}", x=Sneaky("<script>")) == "&lt;script&gt;"


def test_field_values_and_attributes_are_escaped() -> None:
    out = field("name", "Name <required>", HOSTILE, placeholder='say "hi"', required=True, maxlength=5)
    assert 'value="&quot;&gt;&lt;script&gt;' in out and "<script" not in out
    assert 'placeholder="say &quot;hi&quot;"' in out
    assert " required" in out and 'maxlength="5"' in out
    assert "Name &lt;required&gt;" in out
    # False and None attributes are left out entirely.
    assert "autofocus" not in field("x", "X", autofocus=False, placeholder=None)
    assert "placeholder" not in field("x", "X", autofocus=False, placeholder=None)


def test_a_secret_field_has_no_value_to_refill() -> None:
    out = secret_field("secret", "Secret", required=True)
    assert 'type="password"' in out and 'autocomplete="off"' in out and " required" in out
    assert "value=" not in out
    with pytest.raises(TypeError):
        secret_field("secret", "Secret", value="hunter2")  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        field("secret", "Secret", "hunter2", type_="password")


@pytest.mark.parametrize(
    "url",
    ["javascript:alert(1)", "JaVaScRiPt:alert(1)", "data:text/html,<script>x</script>", "//evil.example/x"],
)
def test_only_http_urls_become_links(url: str) -> None:
    out = link_if_web(url)
    assert "<a " not in out and "href" not in out
    assert "<script" not in out


def test_http_links_are_escaped_and_do_not_leak_the_referrer() -> None:
    out = link_if_web('https://example.com/a?b=1&c="2"')
    assert out.startswith("<a ") and 'rel="noopener noreferrer"' in out
    assert 'href="https://example.com/a?b=1&amp;c=&quot;2&quot;"' in out
    assert link_if_web(None) == EMPTY and link_if_web("") == EMPTY


def test_an_empty_table_says_so_across_all_its_columns() -> None:
    out = table(("A", "B", ""), [], empty="Nothing <here>.")
    assert '<td colspan="3" class="muted">Nothing &lt;here&gt;.</td>' in out
    assert "<th>A</th><th>B</th><th></th>" in out
    filled = table(("A",), [Safe("<tr><td>1</td></tr>")], empty="Nothing.")
    assert "Nothing." not in filled and "<td>1</td>" in filled


def test_dropdown_selects_the_chosen_value_and_escapes_labels() -> None:
    out = dropdown(
        "owner", [("me", "you (ada)"), ("team:x", HOSTILE)], "team:x", id_="owner", any_label="any"
    )
    assert out.startswith('<select id="owner" name="owner"><option value="">any</option>')
    assert '<option value="team:x" selected>&quot;&gt;&lt;script&gt;' in out
    assert '<option value="me">' in out
    assert "<script" not in out


def test_checkbox_is_unchecked_unless_asked() -> None:
    assert "checked" not in checkbox("reply", Safe("reply"), False)
    assert " checked>" in checkbox("reply", Safe("reply"), True)


def test_every_post_form_carries_the_csrf_token() -> None:
    viewer = FakeViewer()
    for form in (
        card_form(viewer, "/ui/teams", EMPTY, "Create team"),  # type: ignore[arg-type]
        action_form(viewer, "/ui/endpoints/x/revoke", "Revoke", cls="danger"),  # type: ignore[arg-type]
    ):
        assert form.startswith('<form method="post"')
        assert '<input type="hidden" name="csrf" value="csrf-token-value">' in form
