"""Switchboard: verified webhooks become durable todos that AI agents drain over MCP and answer back."""

from switchboard.hookspecs import hookimpl

__all__ = ["hookimpl"]
