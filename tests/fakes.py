"""Moved to ``switchboard.testing``; no test imports this file.

Kept only because bench/reply.py (owned by the bench work, not edited here) still imports these
three names from ``tests.fakes``; once it imports them from ``switchboard.testing``, delete this file.
"""

from switchboard.testing import FakeProvider, claimed_todo, forge_address

__all__ = ["FakeProvider", "claimed_todo", "forge_address"]
