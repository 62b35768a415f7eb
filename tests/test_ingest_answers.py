"""The 202 body of a stored delivery (``ingest_answers.accepted``): orjson writes it, and a name
orjson refuses still gets a JSON answer."""

from __future__ import annotations

import json

from switchboard.ingest_answers import accepted


def _answer(queue: str) -> tuple[int, str, dict[str, object]]:
    response = accepted(
        [{"id": "td_1", "endpoint": "alpha", "queue": queue, "created": True}],
        created=1,
        verified=True,
        trust_mode="allow_all",
        disposition="routed",
    )
    assert response.body is not None
    return response.status, response.headers["Content-Type"], json.loads(bytes(response.body))


def test_the_202_is_json_with_every_field():
    status, content_type, body = _answer("inbox")
    assert status == 202
    assert content_type == "application/json; charset=utf-8"
    assert body == {
        "todos": [{"id": "td_1", "endpoint": "alpha", "queue": "inbox", "created": True}],
        "created": 1,
        "verified": True,
        "trust_mode": "allow_all",
        "disposition": "routed",
    }


def test_non_ascii_names_travel_as_utf8():
    assert _answer("überweisung")[2]["todos"] == [
        {"id": "td_1", "endpoint": "alpha", "queue": "überweisung", "created": True}
    ]


def test_a_lone_surrogate_still_gets_a_json_answer():
    # orjson refuses a lone surrogate; the standard library escapes it.
    status, content_type, body = _answer("bad\udcff")
    assert status == 202
    assert content_type.startswith("application/json")
    assert body["todos"][0]["queue"] == "bad\udcff"  # type: ignore[index]
