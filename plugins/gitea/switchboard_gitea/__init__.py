"""The gitea provider for Switchboard."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from switchboard.hookspecs import hookimpl
from switchboard.provider import SourceKind

KIND = "gitea"


@hookimpl
def register_kinds(register: Callable[[Any], None]) -> None:
    register(SourceKind(KIND, secret="minted"))
