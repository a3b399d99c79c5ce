"""Session-wide fixtures: a real broker (started on first use, stopped at the end) and free ports."""

from __future__ import annotations

from typing import Callable, Iterator

import pytest

from akresil.testing import EmbeddedBroker, free_port as _free_port


@pytest.fixture(scope="session")
def broker() -> Iterator[EmbeddedBroker]:
    """One Tansu broker for the whole session, the broker these tests were written for (in-memory storage: use unique topic names per test)."""
    with EmbeddedBroker(kind="tansu") as running:
        yield running


@pytest.fixture
def free_port() -> int:
    """A 127.0.0.1 TCP port that was free a moment ago."""
    return _free_port()


@pytest.fixture
def free_port_factory() -> Callable[[], int]:
    """Call it for as many free ports as a test needs."""
    return _free_port
