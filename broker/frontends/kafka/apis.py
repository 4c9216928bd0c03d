"""THE table of what this front end speaks: per API key, the versions served, which are
flexible, and the request and response schemas (field names are Kafka's JSON schema names in
snake_case; versions as there). Only the versions served are listed; ApiVersions answers
exactly this table. Checked against Kafka's own JSON schemas (the ones kafka-python 3 ships).
This module: producing, fetching, metadata, SASL; ``apis_groups.py``: groups, offsets and
topic administration; ``apis_admin.py``: configs, partitions, group deletion, ACLs.
"""

from __future__ import annotations

from wharf.broker.frontends.kafka.apis_admin import ADMIN_APIS
from wharf.broker.frontends.kafka.apis_groups import GROUP_APIS
from wharf.broker.frontends.kafka.apis_records import RECORD_APIS
from wharf.broker.frontends.kafka.apis_txn import TXN_APIS
from wharf.broker.frontends.kafka.schema import (
    BOOL,
    BYTES,
    INT8,
    INT16,
    INT32,
    INT64,
    NSTRING,
    RECORDS,
    STRING,
    Api,
    Array,
    F,
    Struct,
)

__all__ = ["APIS", "API_VERSIONS", "Api"]


def _ints() -> Array:
    return Array(INT32)


_API_LIST = [
    Api(
        0,
        "Produce",
        3,
        8,
        Struct(
            F("transactional_id", NSTRING, "3+"),
            F("acks", INT16),
            F("timeout_ms", INT32),
            F(
                "topic_data",
                Array(
                    Struct(
                        F("name", STRING),
                        F(
                            "partition_data",
                            Array(Struct(F("index", INT32), F("records", RECORDS))),
                        ),
                    )
                ),
            ),
        ),
        Struct(
            F(
                "responses",
                Array(
                    Struct(
                        F("name", STRING),
                        F(
                            "partition_responses",
                            Array(
                                Struct(
                                    F("index", INT32),
                                    F("error_code", INT16),
                                    F("base_offset", INT64),
                                    F("log_append_time_ms", INT64, "2+", -1),
                                    F("log_start_offset", INT64, "5+", -1),
                                    F(
                                        "record_errors",
                                        Array(
                                            Struct(
                                                F("batch_index", INT32),
                                                F("batch_index_error_message", NSTRING),
                                            )
                                        ),
                                        "8+",
                                    ),
                                    F("error_message", NSTRING, "8+"),
                                )
                            ),
                        ),
                    )
                ),
            ),
            F("throttle_time_ms", INT32, "1+"),
        ),
    ),
    Api(
        1,
        "Fetch",
        4,
        11,
        Struct(
            F("replica_id", INT32),
            F("max_wait_ms", INT32),
            F("min_bytes", INT32),
            F("max_bytes", INT32, "3+", 0x7FFFFFFF),
            F("isolation_level", INT8, "4+"),
            F("session_id", INT32, "7+"),
            F("session_epoch", INT32, "7+", -1),
            F(
                "topics",
                Array(
                    Struct(
                        F("topic", STRING),
                        F(
                            "partitions",
                            Array(
                                Struct(
                                    F("partition", INT32),
                                    F("current_leader_epoch", INT32, "9+", -1),
                                    F("fetch_offset", INT64),
                                    F("log_start_offset", INT64, "5+", -1),
                                    F("partition_max_bytes", INT32),
                                )
                            ),
                        ),
                    )
                ),
            ),
            F(
                "forgotten_topics_data",
                Array(Struct(F("topic", STRING), F("partitions", _ints()))),
                "7+",
            ),
            F("rack_id", STRING, "11+"),
        ),
        Struct(
            F("throttle_time_ms", INT32, "1+"),
            F("error_code", INT16, "7+"),
            F("session_id", INT32, "7+"),
            F(
                "responses",
                Array(
                    Struct(
                        F("topic", STRING),
                        F(
                            "partitions",
                            Array(
                                Struct(
                                    F("partition_index", INT32),
                                    F("error_code", INT16),
                                    F("high_watermark", INT64),
                                    F("last_stable_offset", INT64, "4+", -1),
                                    F("log_start_offset", INT64, "5+", -1),
                                    F(
                                        "aborted_transactions",
                                        Array(
                                            Struct(
                                                F("producer_id", INT64), F("first_offset", INT64)
                                            ),
                                            nullable=True,
                                        ),
                                        "4+",
                                    ),
                                    F("preferred_read_replica", INT32, "11+", -1),
                                    F("records", RECORDS),
                                )
                            ),
                        ),
                    )
                ),
            ),
        ),
    ),
    Api(
        2,
        "ListOffsets",
        0,
        5,
        Struct(
            F("replica_id", INT32),
            F("isolation_level", INT8, "2+"),
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
                                    F("current_leader_epoch", INT32, "4+", -1),
                                    F("timestamp", INT64),
                                    F("max_num_offsets", INT32, "0", 1),
                                )
                            ),
                        ),
                    )
                ),
            ),
        ),
        Struct(
            F("throttle_time_ms", INT32, "2+"),
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
                                    F("error_code", INT16),
                                    F("old_style_offsets", Array(INT64), "0"),
                                    F("timestamp", INT64, "1+", -1),
                                    F("offset", INT64, "1+", -1),
                                    F("leader_epoch", INT32, "4+", -1),
                                )
                            ),
                        ),
                    )
                ),
            ),
        ),
    ),
    Api(
        3,
        "Metadata",
        0,
        8,
        Struct(
            F("topics", Array(Struct(F("name", STRING)), nullable=True)),
            F("allow_auto_topic_creation", BOOL, "4+", True),
            F("include_cluster_authorized_operations", BOOL, "8-10"),
            F("include_topic_authorized_operations", BOOL, "8+"),
        ),
        Struct(
            F("throttle_time_ms", INT32, "3+"),
            F(
                "brokers",
                Array(
                    Struct(
                        F("node_id", INT32),
                        F("host", STRING),
                        F("port", INT32),
                        F("rack", NSTRING, "1+"),
                    )
                ),
            ),
            F("cluster_id", NSTRING, "2+"),
            F("controller_id", INT32, "1+", -1),
            F(
                "topics",
                Array(
                    Struct(
                        F("error_code", INT16),
                        F("name", STRING),
                        F("is_internal", BOOL, "1+"),
                        F(
                            "partitions",
                            Array(
                                Struct(
                                    F("error_code", INT16),
                                    F("partition_index", INT32),
                                    F("leader_id", INT32),
                                    F("leader_epoch", INT32, "7+", -1),
                                    F("replica_nodes", _ints()),
                                    F("isr_nodes", _ints()),
                                    F("offline_replicas", _ints(), "5+"),
                                )
                            ),
                        ),
                        F("topic_authorized_operations", INT32, "8+", -(2**31)),
                    )
                ),
            ),
            F("cluster_authorized_operations", INT32, "8-10", -(2**31)),
        ),
    ),
    Api(
        17,
        "SaslHandshake",
        0,
        1,
        Struct(F("mechanism", STRING)),
        Struct(F("error_code", INT16), F("mechanisms", Array(STRING))),
    ),
    Api(
        18,
        "ApiVersions",
        0,
        3,  # v3 is flexible: its answer ends with an EMPTY tag section (kcat 2.0.2 needs it)
        Struct(F("client_software_name", STRING, "3+"), F("client_software_version", STRING, "3+")),
        Struct(
            F("error_code", INT16),
            F(
                "api_keys",
                Array(
                    Struct(F("api_key", INT16), F("min_version", INT16), F("max_version", INT16))
                ),
            ),
            F("throttle_time_ms", INT32, "1+"),
        ),
        flexible_from=3,
    ),
    Api(
        22,
        "InitProducerId",
        0,
        2,
        Struct(
            F("transactional_id", NSTRING),
            F("transaction_timeout_ms", INT32),
            F("producer_id", INT64, "3+", -1),
            F("producer_epoch", INT16, "3+", -1),
        ),
        Struct(
            F("throttle_time_ms", INT32),
            F("error_code", INT16),
            F("producer_id", INT64, "0+", -1),
            F("producer_epoch", INT16),
        ),
        flexible_from=2,
    ),
    Api(
        36,
        "SaslAuthenticate",
        0,
        1,
        Struct(F("auth_bytes", BYTES)),
        Struct(
            F("error_code", INT16),
            F("error_message", NSTRING),
            F("auth_bytes", BYTES),
            F("session_lifetime_ms", INT64, "1+"),
        ),
    ),
]

APIS: dict[int, Api] = {
    api.key: api for api in (*_API_LIST, *GROUP_APIS, *ADMIN_APIS, *RECORD_APIS, *TXN_APIS)
}
API_VERSIONS = 18
