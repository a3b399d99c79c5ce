"""benchmarks/probe_answer_order.py's hook: what it counts between a Produce answer and the node's next Produce."""

from __future__ import annotations


from akresil.protocol.api import ApiKey

from .repo_scripts import load_script

probe_mod = load_script("benchmarks/probe_answer_order.py")


def test_counts_acknowledgements_between_a_produce_answer_and_that_nodes_next_request() -> None:
    probe = probe_mod.Probe()
    probe.on_request_sent(node_id=1)                       # no answer before it: nothing measured
    probe.on_response_received(node_id=1, api_key=ApiKey.PRODUCE)
    probe.on_response_received(node_id=2, api_key=ApiKey.METADATA)   # not a Produce: ignored
    probe.acks += 3
    probe.on_request_sent(node_id=2)                       # another node's request: not this answer's
    probe.acks += 2
    probe.on_request_sent(node_id=1)
    probe.on_request_sent(node_id=1)                       # one measurement per answer
    assert probe.acks_between == [5]
    assert len(probe.gap_ms) == 1 and probe.gap_ms[0] >= 0
    probe.reset()
    assert probe.acks_between == [] and probe.gap_ms == []
