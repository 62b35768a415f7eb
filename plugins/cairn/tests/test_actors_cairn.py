"""Who a verified Cairn delivery names (docs/sources/cairn.md, "Trusted actors"): the signed
``data.actor_id`` of Cairn's wire format (``data/artifact.created.json``, as Cairn sends it), and that
hostile bodies never make ``actors`` raise."""

from __future__ import annotations

import copy
import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import switchboard_cairn as cairn
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from switchboard.sdk import Actors, Delivery, TrustSpec, Verdict
from switchboard.testing import hexmac

WIRE = json.loads((Path(__file__).parent / "data" / "artifact.created.json").read_text())
LEGACY = json.loads(
    (Path(__file__).parents[3] / "tests" / "fixtures" / "cairn" / "comment.created.json").read_text()
)
SECRET = "whsec_cairn_test"


def _verified(payload: dict[str, Any]) -> tuple[Delivery, Verdict]:
    """``payload`` signed as Cairn signs, arriving at its own ``created_at``."""
    body = json.dumps(payload).encode()
    at = datetime.fromisoformat(str(payload["created_at"]).replace("Z", "+00:00"))
    delivery = Delivery("cairn", {"X-Cairn-Signature": "sha256=" + hexmac(SECRET, body)}, body, at, SECRET)
    verdict = cairn.verify(delivery)
    assert verdict.ok, verdict.detail
    return delivery, verdict


def test_the_kind_declares_exact_actor_ids() -> None:
    assert cairn.SOURCE.actors is cairn.actors
    assert cairn.SOURCE.trust == TrustSpec(
        field="actor_ids", label="Cairn actor id", case_insensitive=False, matches=("sender",)
    )


def test_the_wire_formats_actor_id_is_the_sender() -> None:
    delivery, verdict = _verified(WIRE)
    assert cairn.actors(delivery, verdict) == Actors("joe", ())


def test_switchboard_0_1s_shape_names_actor_id() -> None:
    delivery, verdict = _verified(LEGACY)
    assert cairn.actors(delivery, verdict) == Actors("usr_ada", ())


@pytest.mark.parametrize("actor_id", [None, 7, "", "x" * 101, "a\nb", {"id": "joe"}])
def test_an_unusable_actor_id_names_nobody(actor_id: object) -> None:
    payload = copy.deepcopy(WIRE)
    if actor_id is None:
        del payload["data"]["actor_id"]
    else:
        payload["data"]["actor_id"] = actor_id
    delivery, verdict = _verified(payload)
    assert cairn.actors(delivery, verdict) == Actors()


def test_the_legacy_actor_is_not_read_from_a_wire_format_body() -> None:
    """A wire-format body names its actor in ``data`` only: a top-level ``actor`` beside it is not Cairn's."""
    payload = copy.deepcopy(WIRE)
    del payload["data"]["actor_id"]
    payload["actor"] = {"id": "usr_admin"}
    delivery, verdict = _verified(payload)
    assert cairn.actors(delivery, verdict) == Actors()


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=120),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.one_of(json_values, st.fixed_dictionaries({"actor_id": json_values})),
    actor=st.one_of(json_values, st.fixed_dictionaries({"id": json_values})),
    wire=st.booleans(),
)
def test_hostile_bodies_through_verify_never_make_actors_raise(
    data: object, actor: object, wire: bool
) -> None:
    payload: dict[str, Any] = {"event_id": "evt_1", "created_at": "2026-09-11T12:00:00Z"}
    payload.update({"kind": "artifact.created", "data": data} if wire else {"type": "x", "actor": actor})
    delivery, verdict = _verified(payload)
    found = cairn.actors(delivery, verdict)
    assert isinstance(found, Actors) and found.authors == ()
    assert found.sender is None or (0 < len(found.sender) <= 100 and found.sender.isprintable())
