"""DeleteRecords' schema (API 21, versions 0-1: what Kafka's Java and librdkafka admin clients
negotiate down to; v2 only adds the flexible encoding). Kept beside ``apis.py``'s table, which
lists it."""

from __future__ import annotations

from wharf.broker.frontends.kafka.schema import INT16, INT32, INT64, STRING, Api, Array, F, Struct

__all__ = ["RECORD_APIS"]

RECORD_APIS = [
    Api(
        21,
        "DeleteRecords",
        0,
        1,
        Struct(
            F(
                "topics",
                Array(
                    Struct(
                        F("name", STRING),
                        F(
                            "partitions",
                            Array(Struct(F("partition_index", INT32), F("offset", INT64))),
                        ),
                    )
                ),
            ),
            F("timeout_ms", INT32),
        ),
        Struct(
            F("throttle_time_ms", INT32),
            F(
                "topics",
                Array(
                    Struct(
                        F("name", STRING),
                        F(
                            "partitions",
                            Array(
                                Struct(
                                    F("partition_index", INT32),
                                    F("low_watermark", INT64),
                                    F("error_code", INT16),
                                )
                            ),
                        ),
                    )
                ),
            ),
        ),
    ),
]
