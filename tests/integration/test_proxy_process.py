"""FaultProxyProcess: the same script API as FaultProxy, from a child process (the bench's harness)."""

from __future__ import annotations

import pytest

from akresil import Producer
from akresil.testing import EmbeddedBroker
from akresil.testing.proxy_process import FaultProxyProcess

pytestmark = pytest.mark.broker


async def test_a_proxy_in_its_own_process_is_scripted_like_the_in_process_one(broker: EmbeddedBroker) -> None:
    with FaultProxyProcess(broker.bootstrap_servers, nodes=3) as proxy:
        assert proxy.node_ids == (1, 2, 3)
        async with Producer(bootstrap_servers=proxy.bootstrap_servers, linger_ms=0) as producer:
            md = await producer.send("proxy-process-t", b"v", partition=0)
            assert md.offset >= 0
            leader = proxy.leader("proxy-process-t", 0)[0]
            produced = [r for r in proxy.requests(0) if r.node_id == leader]
            assert produced and produced[-1].api_key == 0
            proxy.recorder.clear()
            assert proxy.requests(0) == ()
            proxy.stop_node(leader)
            assert not proxy.is_node_up(leader)
            proxy.start_node(leader)
            assert proxy.is_node_up(leader)
        with pytest.raises(Exception) as info:      # the child's exception comes back as it was raised there
            proxy.stop_node(99)
        assert "99" in str(info.value)
    with pytest.raises(RuntimeError, match="not running"):
        proxy.requests()
