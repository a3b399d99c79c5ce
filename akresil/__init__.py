"""akresil: an asyncio-native Kafka client that stays correct and fast when the cluster misbehaves."""

from __future__ import annotations

from importlib import import_module
from typing import Any

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
    "ShareRecord": "akresil.types",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'akresil' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value
