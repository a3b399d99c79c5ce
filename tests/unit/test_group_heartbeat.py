

def test_the_new_group_apis_mute_on_throttle_from_their_first_version() -> None:
    """KIP-219: these APIs came after it, so a throttled answer always means "stay quiet" (the Cluster mutes
    the node through NodeState, as for every other request)."""
    from akresil.core.node_state import should_mute
    from akresil.protocol.api import ApiKey

    for api in (ApiKey.CONSUMER_GROUP_HEARTBEAT, ApiKey.SHARE_GROUP_HEARTBEAT, ApiKey.SHARE_FETCH,
                ApiKey.SHARE_ACKNOWLEDGE):
        assert should_mute(api, 0) and should_mute(api, 1)
