"""The pyspark names the data source uses, with stand-ins where an older PySpark lacks them.

Imported only by the modules that define Spark classes: ``import rocketstore.spark`` works without
pyspark."""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)

try:  # 4.1+: the streaming sink receives Arrow batches
    from pyspark.sql.datasource import DataSourceStreamArrowWriter as _StreamWriterBase

    _STREAM_ARROW = True
except ImportError:  # 4.0: Rows, turned into Arrow batches in write()
    from pyspark.sql.datasource import DataSourceStreamWriter as _StreamWriterBase

    _STREAM_ARROW = False

try:  # 4.2+: admission control and Trigger.AvailableNow
    from pyspark.sql.streaming.datasource import ReadMaxRows, SupportsTriggerAvailableNow

    _ADMISSION_CONTROL = True
except ImportError:  # 4.0/4.1: latestOffset() is called without a limit

    class ReadMaxRows:  # never passed in: isinstance() checks stay false
        max_rows = 0

    class SupportsTriggerAvailableNow:
        pass

    _ADMISSION_CONTROL = False


__all__ = [
    "DataSource",
    "DataSourceArrowWriter",
    "DataSourceReader",
    "DataSourceStreamReader",
    "InputPartition",
    "WriterCommitMessage",
    "_StreamWriterBase",
    "_STREAM_ARROW",
    "ReadMaxRows",
    "SupportsTriggerAvailableNow",
    "_ADMISSION_CONTROL",
]
