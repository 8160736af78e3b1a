"""The ``rocketstore`` data source: Spark's entry point, handing out the readers and writers."""

from __future__ import annotations

from rocketstore.spark._options import COLUMNS, FORMAT_NAME, SCHEMA_DDL, _bool_option
from rocketstore.spark._pyspark import DataSource
from rocketstore.spark._reader import RocketStoreReader
from rocketstore.spark._stream import RocketStoreStreamReader
from rocketstore.spark._writer import RocketStoreStreamWriter, RocketStoreWriter

# ---------------------------------------------------------------------------------------------
# The data source


class RocketStoreDataSource(DataSource):
    """``format("rocketstore")``: batch reads and batch writes of rocketstore / RocketMQ stores."""

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def schema(self):
        if not _bool_option(self.options, "includeBody", True):
            return ", ".join(f"{n} {k}" for n, k in COLUMNS if n != "body")
        return SCHEMA_DDL

    def reader(self, schema):
        options = dict(self.options)
        if _bool_option(options, "pushFilters", False):
            raise ValueError(
                "rocketstore does not push filters: Spark 4.1-4.3 keep a pushed read plan on the "
                "data source a DataFrame's queries share, so a later query of the same DataFrame "
                "would return the filtered rows; narrow the read with the subscribe, assign, "
                "startingOffsets/endingOffsets or startingTimestamp/endingTimestamp options"
            )
        return RocketStoreReader([f.name for f in schema.fields], options)

    def streamReader(self, schema):
        return RocketStoreStreamReader([f.name for f in schema.fields], dict(self.options))

    def writer(self, schema, overwrite: bool):
        if overwrite:
            raise ValueError(
                'rocketstore appends only: use .mode("append") (a store is a log; '
                "overwrite would mean deleting messages)"
            )
        return RocketStoreWriter(dict(self.options), [f.name for f in schema.fields])

    def streamWriter(self, schema, overwrite: bool):
        if overwrite:
            raise ValueError('rocketstore appends only: use outputMode("append") (a store is a log)')
        return RocketStoreStreamWriter(dict(self.options), [f.name for f in schema.fields])
