"""The ``rocketstore`` data source: Spark's entry point, handing out the readers and writers."""

from __future__ import annotations

from rocketstore.spark._options import FORMAT_NAME, _bool_option, check_options, schema_ddl
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
        return schema_ddl(self.options)

    def reader(self, schema):
        options = dict(self.options)
        check_options(options, "read")
        if _bool_option(options, "pushFilters", False):
            raise ValueError(
                "rocketstore does not push filters: Spark 4.1-4.3 keep a pushed read plan on the "
                "data source a DataFrame's queries share, so a later query of the same DataFrame "
                "would return the filtered rows; narrow the read with the subscribe, assign, "
                "startingOffsets/endingOffsets or startingTimestamp/endingTimestamp options"
            )
        return RocketStoreReader([f.name for f in schema.fields], options)

    def streamReader(self, schema):
        check_options(self.options, "stream read")
        return RocketStoreStreamReader([f.name for f in schema.fields], dict(self.options))

    def writer(self, schema, overwrite: bool):
        if overwrite:
            raise ValueError(
                'rocketstore appends only: use .mode("append") (a store is a log; '
                "overwrite would mean deleting messages)"
            )
        check_options(self.options, "write")
        return RocketStoreWriter(dict(self.options), [f.name for f in schema.fields])

    def streamWriter(self, schema, overwrite: bool):
        if overwrite:
            raise ValueError('rocketstore appends only: use outputMode("append") (a store is a log)')
        check_options(self.options, "stream write")
        return RocketStoreStreamWriter(dict(self.options), [f.name for f in schema.fields])
