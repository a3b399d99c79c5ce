"""The runner's processing_guarantee="exactly_once" refuses what cannot be exactly once: a producer without a
transactional id or not yet initialised, a consumer that reads uncommitted records.  (Exactly-once copies, with
handler timeouts and with a killed process, run on every broker with transactions:
tests/capabilities/test_transactions.py.)
"""

from __future__ import annotations

import pytest

from akresil import Consumer, Producer, errors
from akresil.runner import HandlerContext, Runner
from akresil.testing import EmbeddedBroker
from akresil.types import ConsumerRecord

from ..harness.eos import unique_name


async def test_exactly_once_needs_a_transactional_producer_and_read_committed(noida: EmbeddedBroker) -> None:
    bs = noida.bootstrap_servers

    async def handler(rec: ConsumerRecord, ctx: HandlerContext) -> None: ...

    async with Consumer("x", bootstrap_servers=bs, group_id="g", enable_auto_commit=False,
                        isolation_level="read_committed") as consumer, \
            Producer(bootstrap_servers=bs) as plain:
        with pytest.raises(errors.ConfigError, match="producer: .*transactional"):
            Runner(consumer, handler, producer=plain, processing_guarantee="exactly_once")
        with pytest.raises(errors.ConfigError, match="processing_guarantee"):
            Runner(consumer, handler, producer=plain, processing_guarantee="twice")  # type: ignore[arg-type]
    async with Consumer("x", bootstrap_servers=bs, group_id="g", enable_auto_commit=False) as uncommitted, \
            Producer(bootstrap_servers=bs, transactional_id=unique_name("cfg")) as txp:
        with pytest.raises(errors.ConfigError, match="init_transactions"):
            Runner(uncommitted, handler, producer=txp, processing_guarantee="exactly_once")
        await txp.init_transactions()
        with pytest.raises(errors.ConfigError, match="isolation_level"):
            Runner(uncommitted, handler, producer=txp, processing_guarantee="exactly_once")
