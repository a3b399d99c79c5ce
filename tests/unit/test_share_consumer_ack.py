"""``ShareConsumer.acknowledge``, explicit mode's call per record, on a consumer that is not connected: its state
is fed a ShareFetch answer directly (no broker, no sleeps). The call reads the clock as ``source() * scale``
(``net.clock.clock_source``), so these pin that the lock deadline is still compared in the state's milliseconds."""

from __future__ import annotations

import time

import pytest

from akresil import ShareConsumer, errors
from akresil.core.share_state import AckType
from akresil.net.clock import clock_source, monotonic_ms
from akresil.types import ShareRecord

from .conftest import BackendLookups
from .test_share_state import TID, TP0, batch, fetch_answer


def _holding(records: int, *, lock_ms: int, sent_at: float | None = None) -> tuple[ShareConsumer, list[ShareRecord]]:
    """A consumer (marked started and running, as after ``start()``) holding ``records`` records of TP0 delivered once."""
    c = ShareConsumer("t", bootstrap_servers="127.0.0.1:9", group_id="g", acknowledgement_mode="explicit")
    c._runtime.started = c._runtime.running = True
    st = c._state
    st.member_id = "m"
    st.set_assignment([TP0])
    now = monotonic_ms() if sent_at is None else sent_at
    (fetch,) = st.plan(now, leader_of=lambda _: 1, topic_id_of=lambda _: TID)
    st.on_fetch_response(fetch, fetch_answer(0, batch(0, records), [(0, records - 1, 1)], lock_ms=lock_ms), now)
    return c, st.poll(records, now)


def test_clock_source_reads_the_default_clock_inline_and_any_other_as_itself() -> None:
    source, scale = clock_source(monotonic_ms)
    assert (source, scale) == (time.monotonic, 1000.0)
    before = monotonic_ms()
    read = source() * scale
    assert before <= read <= monotonic_ms()

    def fake() -> float:
        return 42.0
    assert clock_source(fake) == (fake, 1.0)


def test_acknowledge_settles_held_records_with_their_type() -> None:
    c, recs = _holding(3, lock_ms=60_000)
    c.acknowledge(recs[0])
    c.acknowledge(recs[1], "release")
    c.acknowledge(recs[2], type("Kind", (str,), {})("reject"))      # a str subclass is a type name too
    pending = c._state._sessions[1].pending[TP0]
    assert pending == {0: AckType.ACCEPT, 1: AckType.RELEASE, 2: AckType.REJECT}
    with pytest.raises(errors.IllegalStateError):
        c.acknowledge(recs[0])                                     # settled already


def test_acknowledge_takes_accept_by_value_not_only_the_default_object() -> None:
    """The default type is recognised by identity; an equal string built at run time (not the interned literal)
    and a str subclass equal to it are the same type name."""
    c, recs = _holding(3, lock_ms=60_000)
    c.acknowledge(recs[0], "".join(["acc", "ept"]))
    c.acknowledge(recs[1], type("Kind", (str,), {})("accept"))
    c.acknowledge(recs[2], "accept")
    assert c._state._sessions[1].pending[TP0] == {0: AckType.ACCEPT, 1: AckType.ACCEPT, 2: AckType.ACCEPT}


def test_acknowledge_refuses_a_bad_type_or_record() -> None:
    c, recs = _holding(1, lock_ms=60_000)
    with pytest.raises(errors.ConfigError, match="type: 1 is not one of"):
        c.acknowledge(recs[0], 1)  # type: ignore[arg-type]
    with pytest.raises(errors.ConfigError, match="type: 'accepted' is not one of"):
        c.acknowledge(recs[0], "accepted")
    with pytest.raises(TypeError, match="record: expected a ShareRecord"):
        c.acknowledge(tuple(recs[0]))  # type: ignore[arg-type]
    c.acknowledge(recs[0])                                         # still held: the refusals settled nothing


def test_acknowledge_after_the_lock_ran_out_reports_it_instead_of_sending() -> None:
    # fetched 2 s ago with a 1 s lock: the deadline passed on the consumer's (millisecond) clock
    c, recs = _holding(2, lock_ms=1_000, sent_at=monotonic_ms() - 2_000)
    c.acknowledge(recs[0])
    assert TP0 not in c._state._sessions[1].pending
    assert isinstance(c._state.take_results()[TP0], errors.AcquisitionLockExpiredError)


def test_acknowledge_raises_the_membership_fatal_error() -> None:
    c, recs = _holding(1, lock_ms=60_000)
    c._group.member.core.fail(errors.GroupAuthorizationFailedError("no"))
    with pytest.raises(errors.GroupAuthorizationFailedError):
        c.acknowledge(recs[0])


async def test_a_waiting_poll_and_a_commit_resolve_the_back_end_once(backend_lookups: BackendLookups) -> None:
    """Issue 35 item 5: each ``getmany`` that waited and each ``commit()`` entered ``anyio.move_on_after``, which
    looks the running back-end up (sniffio, then asyncio's current task: pure Python on 3.11) for its scope and
    for the clock. They use the back-end's scope and clock resolved once (``net.backend``) instead."""
    c, recs = _holding(2, lock_ms=60_000)
    assert await c.getmany(timeout_ms=0.5) == {}           # warm: the first wait resolves the back-end
    backend_lookups.start()
    for rec in recs:
        c.acknowledge(rec)
    for _ in range(3):
        assert await c.getmany(timeout_ms=0.5) == {}       # nothing buffered: each poll waits out its timeout
        await c.commit(timeout_ms=0.5)                     # no broker: the ShareAcknowledge cannot be answered
    backend_lookups.stop()
    assert backend_lookups.calls == 0
