"""What the loader refuses, each with one line naming the plugin and the fix, and what the call-time
guards turn into provider faults. A refused plugin is skipped whole; the others load."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest
from fixtures import memo_plugin

from switchboard import plugins
from switchboard.plugin_checks import ProviderFault
from switchboard.sdk import (
    Address,
    CheckResult,
    ConnectionCheck,
    ConnectionKind,
    Delivery,
    PostResult,
    ReplyPost,
    Setting,
    SourceKind,
    Verdict,
    hookimpl,
    secret_rule,
)

Register = Callable[[Any], None]


def source(name: str = "toy", **changes: Any) -> SourceKind:
    values: dict[str, Any] = {"secret": "none", "verify": lambda d: Verdict(ok=True, detail="ok", payload={})}
    return SourceKind(name, **{**values, **changes})


async def _check(check: ConnectionCheck) -> CheckResult:
    return CheckResult(ok=True)


async def _post(post: ReplyPost) -> PostResult:
    return PostResult(state="sent")


def connection(name: str = "toy", **changes: Any) -> ConnectionKind:
    values: dict[str, Any] = {
        "normalize_account_key": str.strip,
        "account_matches": lambda key, address: True,
        "target_of": lambda address: "",
        "text_limit": 100,
        "test": _check,
        "post": _post,
    }
    return ConnectionKind(name, **{**values, **changes})


class Plugin:
    """A plugin object that registers the given kinds."""

    def __init__(self, name: str, *kinds: object) -> None:
        self.__name__ = name
        self.kinds = kinds

    @hookimpl
    def register_kinds(self, register: Register) -> None:
        for kind in self.kinds:
            register(kind)


def refusal(*extra: object) -> tuple[plugins.Providers, plugins.Plugin]:
    """Load the built-ins, memo and ``extra``; the one refused plugin (memo and the built-ins load)."""
    providers = plugins.load(entrypoints=False, extra=[memo_plugin, *extra])
    assert {"generic", "stripe", "memo"} <= set(providers.sources), "the others must keep loading"
    (refused,) = providers.failed
    assert refused.kinds == [] and refused.status == "failed"
    return providers, refused


async def _verify_later(delivery: Delivery) -> Verdict:
    return Verdict.refuse("later")


async def _matches_later(key: str, address: Address) -> bool:
    return True


@pytest.mark.parametrize(
    ("kind", "error"),
    [
        (
            source(verify=_verify_later),
            "SourceKind 'toy': verify is async def; make it a plain def that returns its value "
            "(only a ConnectionKind's post and test may be async)",
        ),
        (
            connection(account_matches=_matches_later),
            "ConnectionKind 'toy': account_matches is async def; make it a plain def that returns its value "
            "(only a ConnectionKind's post and test may be async)",
        ),
        (source(verify="yes"), "SourceKind 'toy': verify must be a function, not str"),
        (
            source(secret="sometimes"),
            "SourceKind 'toy': secret must be one of minted, provider, none, not 'sometimes'",
        ),
        (source(payload_is_body="yes"), "SourceKind 'toy': payload_is_body must be True or False"),
        (
            source("Toy-Kind"),
            "SourceKind 'Toy-Kind': a kind's name is 1-40 lower-case letters, digits and _, "
            "starting with a letter (it names the SWITCHBOARD_<KIND>_ settings)",
        ),
        (connection(text_limit=0), "ConnectionKind 'toy': text_limit must be a positive integer"),
        (connection(post=None), "ConnectionKind 'toy': post must be a function (async def or def)"),
        (
            connection(settings=(Setting("SWITCHBOARD_OTHER_URL", ""),)),
            "ConnectionKind 'toy': setting 'SWITCHBOARD_OTHER_URL' must be named SWITCHBOARD_TOY_…",
        ),
        (
            connection("outbound", settings=(Setting("SWITCHBOARD_OUTBOUND_LIMIT_PER_HOST", ""),)),
            "ConnectionKind 'outbound': setting SWITCHBOARD_OUTBOUND_LIMIT_PER_HOST is a core setting; "
            "choose another name",
        ),
        (
            connection(secret_rules=(secret_rule("github-pat", "mine", r"x_[a-z]{30}"),)),
            "ConnectionKind 'toy': secret rule id 'github-pat' is empty or already used; give it a unique id",
        ),
        (
            connection(secret_rules=(memo_plugin.KEY_RULE,)),
            "ConnectionKind 'toy': secret rule id 'memo-api-key' is empty or already used; "
            "give it a unique id",
        ),
        ("toy", "register() takes a SourceKind or a ConnectionKind from switchboard.sdk, not str"),
    ],
)
def test_a_kind_that_cannot_work_is_refused_with_the_fix(kind: object, error: str) -> None:
    _, refused = refusal(Plugin("toy_plugin", source("toy_ok"), kind))
    assert refused.name == "toy_plugin" and refused.error == error
    # All or nothing: the plugin's good kind is not left half-registered.


def test_all_or_nothing_and_strict_raises(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR):
        providers, _ = refusal(Plugin("toy_plugin", source("toy_ok"), source(verify=_verify_later)))
    assert "toy_ok" not in providers.sources
    (line,) = [r.getMessage() for r in caplog.records if "toy_plugin" in r.getMessage()]
    assert (
        line.startswith("plugin 'toy_plugin' ((extra) ")
        and "not loaded: SourceKind 'toy': verify is async" in line
    )
    with pytest.raises(
        plugins.PluginError, match=r"^plugin 'toy_plugin': SourceKind 'toy': verify is async def"
    ):
        plugins.load(
            entrypoints=False, extra=[Plugin("toy_plugin", source(verify=_verify_later))], strict=True
        )


def test_a_kind_registered_twice_is_refused_naming_the_owner() -> None:
    providers, refused = refusal(Plugin("impostor", memo_plugin.SOURCE))
    assert refused.error == (
        "source kind 'memo' is already registered by plugin 'fixtures.memo_plugin'; "
        "uninstall one of them or disable one with SWITCHBOARD_DISABLE_PLUGINS"
    )
    assert providers.owners[("source", "memo")] == "fixtures.memo_plugin"
    _, refused = refusal(Plugin("twice", source(), source()))
    assert refused.error == "registers source kind 'toy' twice; register each kind once"
    # A source and a connection kind may share a name (each has its own table).
    both = plugins.load(entrypoints=False, extra=[Plugin("both", source(), connection())], strict=True)
    assert "toy" in both.sources and "toy" in both.connections


class Misspelled:
    __name__ = "misspelled"

    @hookimpl
    def register_kind(self, register: Register) -> None:
        register(source())


class OldContract:
    __name__ = "old_contract"

    @hookimpl
    def register_kinds(self, register: Register) -> None:
        register(source())

    @hookimpl
    def verify(self, delivery: Delivery) -> Verdict | None:
        return None


class Raising:
    __name__ = "raising"

    @hookimpl
    def register_kinds(self, register: Register) -> None:
        raise RuntimeError("no config file")


class Silent:
    __name__ = "silent"

    def register_kinds(self, register: Register) -> None:  # no @hookimpl: pluggy never sees it
        register(source())


class WrongArgument:
    __name__ = "wrong_argument"

    @hookimpl
    def register_kinds(self, registrar: Register) -> None:
        registrar(source())


@pytest.mark.parametrize(
    ("plugin", "error"),
    [
        (
            Misspelled(),
            "implements 'register_kind', which is not a switchboard hook; did you mean register_kinds?",
        ),
        (
            OldContract(),
            "implements verify, a hook of the 0.1 contract; register it on the kind instead "
            "(SourceKind(verify=…)) and depend on switchboard>=0.2",
        ),
        (Raising(), "register_kinds raised RuntimeError: no config file"),
        (
            Silent(),
            "registered no kinds; decorate register_kinds with @hookimpl (from switchboard.sdk) and call "
            "register(...) with each kind",
        ),
    ],
)
def test_a_plugin_with_a_wrong_hook_is_refused_and_nothing_stays_pending(plugin: object, error: str) -> None:
    providers, refused = refusal(plugin)
    assert refused.error == error
    assert "toy" not in providers.sources
    providers.pm.check_pending()  # the refused plugin's hooks went with it


def test_a_hook_with_the_wrong_arguments_is_refused() -> None:
    _, refused = refusal(WrongArgument())
    assert refused.error is not None and refused.error.startswith("cannot be registered:")
    assert "registrar" in refused.error


# ---------------------------------------------------------------------------------------------
# Call time


def test_a_plain_function_returning_an_awaitable_is_a_fault_at_call_time(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sneaky = connection(account_matches=lambda key, address: _matches_later(key, address))
    providers = plugins.load(entrypoints=False, extra=[Plugin("sneaky", sneaky)], strict=True)
    kind = providers.connection("toy")
    address = Address("toy_room", "toy", "toy", {})
    with caplog.at_level(logging.ERROR):
        for _ in range(2):
            # A coroutine is truthy: taken as an answer, it would match every account.
            with pytest.raises(ProviderFault, match="account_matches returned an awaitable"):
                kind.account_matches("acme", address)
    assert len([r for r in caplog.records if "account_matches returned" in r.getMessage()]) == 1


def test_a_wrong_type_is_a_fault_and_truthy_matches_are_booleans() -> None:
    odd = connection(target_of=lambda address: 42, account_matches=lambda key, address: "yes")
    providers = plugins.load(entrypoints=False, extra=[Plugin("odd", odd, source(verify=lambda d: None))])
    kind = providers.connection("toy")
    address = Address("toy_room", "toy", "toy", {})
    assert kind.account_matches("acme", address) is True
    with pytest.raises(ProviderFault, match="target_of returned int, not str"):
        kind.target_of(address)
    with pytest.raises(ProviderFault, match="verify returned NoneType, not Verdict"):
        providers.source("toy").verify(Delivery("toy", {}, b"", None, None))  # type: ignore[arg-type]


async def test_post_and_test_may_be_async_or_plain_and_must_answer_their_type() -> None:
    plain = connection(test=lambda check: CheckResult(ok=True, detail="plain"), post=lambda post: "sent")
    providers = plugins.load(entrypoints=False, extra=[Plugin("plain", plain)], strict=True)
    kind = providers.connection("toy")
    check = ConnectionCheck(http=None, kind="toy", account_key="a", secret="s")  # type: ignore[arg-type]
    assert (await kind.test(check)).detail == "plain"
    post = ReplyPost(None, "toy", "a", "s", Address("t", "toy", "t", {}), "hi", "rp_1")  # type: ignore[arg-type]
    with pytest.raises(ProviderFault, match="post answered str, not PostResult"):
        await kind.post(post)
