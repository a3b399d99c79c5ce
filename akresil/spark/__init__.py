"""akresil as a PySpark data source named ``akresil`` (extra ``spark``: pyspark>=4, pyarrow, pandas<3).

```python
import akresil.spark
akresil.spark.register(spark)
df = spark.read.format("akresil").option("kafka.bootstrap.servers", bs).option("subscribe", "t").load()
df.write.format("akresil").option("kafka.bootstrap.servers", bs).option("topic", "out").mode("append").save()
akresil.spark.last_write_summary()
query = (spark.readStream.format("akresil").option("kafka.bootstrap.servers", bs).option("subscribe", "t").load()
         .writeStream.format("akresil").option("kafka.bootstrap.servers", bs).option("topic", "out")
         .option("checkpointLocation", "/path/to/checkpoint").start())
akresil.spark.stream_write_summaries(query.id)
```

The pyspark-dependent parts load on first use, so the pure modules (``options``, ``offsets``) import
without pyspark and a missing pyspark is reported by name.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_LAZY = {
    "register": "akresil.spark.source",
    "last_write_summary": "akresil.spark.source",
    "stream_write_summaries": "akresil.spark.source",
    "AkresilDataSource": "akresil.spark.source",
    "WriteSummary": "akresil.spark.writer",
    "DeliveryFailedError": "akresil.spark.writer",
    "DataLossError": "akresil.spark.offsets",
}

__all__ = list(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'akresil.spark' has no attribute {name!r}")
    try:
        value = getattr(import_module(module), name)
    except ModuleNotFoundError as exc:
        if exc.name in ("pyspark", "pyarrow", "pandas"):
            raise ModuleNotFoundError(
                f"akresil.spark needs {exc.name}: pip install 'akresil[spark]' (pyspark>=4.0 and Java 17+)",
                name=exc.name) from exc
        raise
    globals()[name] = value
    return value
