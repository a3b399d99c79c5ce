"""Test support shipped with akresil: a real broker in a subprocess for users' own tests and demos."""

from __future__ import annotations

from .broker import BrokerStartError, EmbeddedBroker, free_port, probe_api_versions

__all__ = ["BrokerStartError", "EmbeddedBroker", "free_port", "probe_api_versions"]
