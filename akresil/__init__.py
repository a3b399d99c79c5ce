"""akresil: an asyncio-native Kafka client that stays correct and fast when the cluster misbehaves."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:   # type checkers see the real classes; at run time they load on first use (_LAZY)
    from .admin import Admin as Admin
    from .consumer import Consumer as Consumer
    from .core.events import Hook as Hook
    from .delivery import DeliveryFuture as DeliveryFuture
    from .producer import Producer as Producer
    from .share_consumer import ShareConsumer as ShareConsumer
    from .types import ConsumerRecord as ConsumerRecord
    from .types import NewTopic as NewTopic
    from .types import RecordMetadata as RecordMetadata
    from .types import ShareRecord as ShareRecord
    from .types import TopicPartition as TopicPartition

__version__ = "0.1.0.dev0"

# Public names, imported on first use so `import akresil` stays cheap and the layers load only when needed.
_LAZY = {
    "Producer": "akresil.producer",
    "Consumer": "akresil.consumer",
    "ShareConsumer": "akresil.share_consumer",
    "Admin": "akresil.admin",
    "NewTopic": "akresil.types",
    "TopicPartition": "akresil.types",
    "RecordMetadata": "akresil.types",
    "ConsumerRecord": "akresil.types",
    "DeliveryFuture": "akresil.delivery",
    "Hook": "akresil.core.events",
    "ShareRecord": "akresil.types",
}

# spelled out (not ``[*_LAZY]``): type checkers read __all__ literally
__all__ = ["__version__", "Producer", "Consumer", "Admin", "NewTopic", "TopicPartition", "RecordMetadata",
           "ConsumerRecord", "DeliveryFuture", "ShareConsumer", "ShareRecord", "Hook"]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'akresil' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value
