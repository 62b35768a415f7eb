"""The plugin system: discovery through entry points, listing, and dispatch to the right provider."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from switchboard import plugins
from switchboard.provider import Address, Delivery, ReplyPost, Verdict, hmac_sha256_hex

THIRDPARTY = Path(__file__).parent / "thirdparty"


def _site_with_linear(tmp_path: Path) -> Path:
    """A site directory holding the linear provider as an installed distribution would."""
    site = tmp_path / "site"
    dist = site / "switchboard_linear-0.3.1.dist-info"
    dist.mkdir(parents=True)
    shutil.copy(THIRDPARTY / "switchboard_linear.py", site / "switchboard_linear.py")
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: switchboard-linear\nVersion: 0.3.1\n")
    (dist / "entry_points.txt").write_text("[switchboard]\nlinear = switchboard_linear\n")
    return site


def test_plugins_json_lists_every_provider_with_version_kinds_and_hooks(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(_site_with_linear(tmp_path))}
    out = subprocess.run(
        [sys.executable, "-m", "switchboard", "plugins", "--json"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    rows = {row["name"]: row for row in json.loads(out.stdout)["plugins"]}
    assert {"generic", "stripe", "github", "gitea", "slack", "cairn", "linear"} <= set(rows)
    linear = rows["linear"]
    assert (linear["package"], linear["version"]) == ("switchboard-linear", "0.3.1")
    assert linear["source_kinds"] == ["linear"] and linear["connection_kinds"] == ["linear"]
    assert linear["hooks"] == ["derive_address", "is_echo", "post_reply", "verify"]
    assert rows["generic"]["builtin"] and rows["generic"]["source_kinds"] == ["generic"]
    assert rows["github"]["package"] == "switchboard-github"


def _linear_module():
    sys.path.insert(0, str(THIRDPARTY))
    try:
        import switchboard_linear
    finally:
        sys.path.remove(str(THIRDPARTY))
    return switchboard_linear


def _delivery(source: str, body: bytes, headers: dict[str, str], secret: str | None) -> Delivery:
    return Delivery(source=source, headers=headers, body=body, received_at=datetime.now(UTC), secret=secret)


def test_each_hook_call_reaches_the_provider_that_owns_the_kind() -> None:
    providers = plugins.load(extra=[_linear_module()])
    assert "linear" in providers.sources and "linear" in providers.connections

    body = b'{"type":"Comment","issue_id":"ENG42"}'
    linear = _delivery("linear", body, {"Linear-Signature": hmac_sha256_hex("s", body)}, "s")
    verdict = providers.hook.verify(delivery=linear)
    assert verdict.ok and verdict.event == "Comment"
    address = providers.hook.derive_address(delivery=linear, verdict=verdict)
    assert address == Address(
        "linear_comment", "linear", "linear ENG42", {"workspace": "acme", "issue_id": "ENG42"}
    )

    # Stripe is verified by stripe, not by whichever provider registered first.
    stripe = _delivery("stripe", b"{}", {}, "whsec_x")
    refused = providers.hook.verify(delivery=stripe)
    assert isinstance(refused, Verdict) and not refused.ok and "missing" in refused.detail
    generic = _delivery("generic", b'{"title":"hi"}', {}, None)
    assert providers.hook.verify(delivery=generic).detail.startswith("not verified")
    assert (
        providers.hook.derive_address(delivery=generic, verdict=providers.hook.verify(delivery=generic))
        is None
    )


async def test_post_reply_dispatch_is_not_captured_by_another_providers_coroutine() -> None:
    providers = plugins.load(extra=[_linear_module()])
    post = ReplyPost(
        http=None,
        kind="linear",
        account_key="acme",
        secret="k",
        address=Address("linear_comment", "linear", "linear X", {}),
        text="hi",
        reply_id="rp_1",
    )
    result = await providers.hook.post_reply(post=post)
    assert result.state == "sent" and result.object_id == "lc_rp_1"
    # A kind nobody owns gets no answer at all (rather than some provider's coroutine).
    nobody = ReplyPost(
        http=None, kind="nobody", account_key="", secret="", address=post.address, text="", reply_id="rp_2"
    )
    assert providers.hook.post_reply(post=nobody) is None


def test_tests_can_load_no_installed_plugins() -> None:
    providers = plugins.load(entrypoints=False)
    assert set(providers.sources) == {"generic", "stripe"}


def test_a_kind_registered_twice_is_refused() -> None:
    mod = _linear_module()

    class Impostor:
        register_kinds = staticmethod(mod.register_kinds)

    with pytest.raises(ValueError, match="already registered"):
        plugins.load(entrypoints=False, extra=[mod, Impostor()])
