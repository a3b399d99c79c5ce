"""The end-to-end harness's ``LoopLag``: upper bounds on wire timing widen by exactly what it saw."""

from __future__ import annotations

import asyncio
import time

from ..harness.e2e import SLACK_MS, loop_lag


async def test_loop_lag_sees_a_blocked_loop_and_widens_slack_by_it() -> None:
    async with loop_lag() as lag:
        await asyncio.sleep(0.02)
        quiet = lag.max_ms
        time.sleep(0.15)                 # the loop is blocked: every timer due meanwhile fires late
        await asyncio.sleep(0.02)
    assert quiet < 100
    assert lag.max_ms >= 140
    assert lag.slack_ms() == SLACK_MS + lag.max_ms and lag.slack_ms(10) == 10 + lag.max_ms
