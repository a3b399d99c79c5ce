"""Unit-test settings: hypothesis without per-example deadlines (CI machines are shared and noisy); shared fixtures."""

from __future__ import annotations

import os
from typing import Iterator

import pytest

from hypothesis import HealthCheck, settings

settings.register_profile("akresil", deadline=None, suppress_health_check=[HealthCheck.too_slow],
                          print_blob=True)
settings.register_profile("ci", parent=settings.get_profile("akresil"), derandomize=True)
settings.load_profile("ci" if os.environ.get("CI") else "akresil")


class BackendLookups:
    """Counts anyio's look-ups of the running back-end (``get_async_backend``, called by every generic
    ``CancelScope()``, ``Event()`` and ``current_time()``) while ``counting`` is on."""

    def __init__(self) -> None:
        import sys

        from anyio._core import _eventloop
        self.real = _eventloop.get_async_backend
        # every anyio module that looks the back-end up (each imported the function by name)
        self.users = [m for name, m in list(sys.modules.items())
                      if name.startswith("anyio.") and getattr(m, "get_async_backend", None) is self.real]
        assert len(self.users) >= 3
        self.calls = 0

    def _counted(self, *args: object, **kwargs: object) -> object:
        self.calls += 1
        return self.real(*args, **kwargs)  # type: ignore[arg-type]

    def start(self) -> None:
        for m in self.users:
            m.get_async_backend = self._counted  # type: ignore[attr-defined]

    def stop(self) -> None:
        for m in self.users:
            m.get_async_backend = self.real  # type: ignore[attr-defined]


@pytest.fixture
def backend_lookups() -> Iterator[BackendLookups]:
    counter = BackendLookups()
    try:
        yield counter
    finally:
        counter.stop()
