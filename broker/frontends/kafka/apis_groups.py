"""The table of ``apis.py``, continued: groups, committed offsets and topic administration
(the same schema language, the same rules)."""

from __future__ import annotations

from wharf.broker.frontends.kafka.schema import (
    BOOL,
    BYTES,
    INT8,
    INT16,
    INT32,
    INT64,
    NSTRING,
    STRING,
    Api,
    Array,
    F,
    Struct,
)

__all__ = ["GROUP_APIS"]


def _ints() -> Array:
    return Array(INT32)


GROUP_APIS = [
    Api(
        8,
        "OffsetCommit",
        0,
        7,
        Struct(
            F("group_id", STRING),
            F("generation_id", INT32, "1+", -1),
            F("member_id", STRING, "1+"),
            F("group_instance_id", NSTRING, "7+"),
            F("retention_time_ms", INT64, "2-4", -1),
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
                                    F("committed_offset", INT64),
                                    F("committed_leader_epoch", INT32, "6+", -1),
                                    F("commit_timestamp", INT64, "1", -1),
                                    F("committed_metadata", NSTRING),
                                )
                            ),
                        ),
                    )
                ),
            ),
        ),
        Struct(
            F("throttle_time_ms", INT32, "3+"),
            F(
                "topics",
                Array(
                    Struct(
                        F("name", STRING),
                        F(
                            "partitions",
                            Array(Struct(F("partition_index", INT32), F("error_code", INT16))),
                        ),
                    )
                ),
            ),
        ),
    ),
    Api(
        9,
        "OffsetFetch",
        0,
        7,  # v7's require_stable: a read_committed consumer's (KIP-447); v6 only flexible
        Struct(
            F("group_id", STRING),
            F(
                "topics",
                Array(
                    Struct(F("name", STRING), F("partition_indexes", _ints())),
                    nullable=True,
                ),
            ),
            F("require_stable", BOOL, "7+"),
        ),
        Struct(
            F("throttle_time_ms", INT32, "3+"),
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
                                    F("committed_offset", INT64),
                                    F("committed_leader_epoch", INT32, "5+", -1),
                                    F("metadata", NSTRING),
                                    F("error_code", INT16),
                                )
                            ),
                        ),
                    )
                ),
            ),
            F("error_code", INT16, "2+"),
        ),
        flexible_from=6,
    ),
    Api(
        10,
        "FindCoordinator",
        0,
        2,
        Struct(F("key", STRING), F("key_type", INT8, "1+")),
        Struct(
            F("throttle_time_ms", INT32, "1+"),
            F("error_code", INT16),
            F("error_message", NSTRING, "1+"),
            F("node_id", INT32),
            F("host", STRING),
            F("port", INT32),
        ),
    ),
    Api(
        11,
        "JoinGroup",
        0,
        5,
        Struct(
            F("group_id", STRING),
            F("session_timeout_ms", INT32),
            F("rebalance_timeout_ms", INT32, "1+", -1),
            F("member_id", STRING),
            F("group_instance_id", NSTRING, "5+"),
            F("protocol_type", STRING),
            F("protocols", Array(Struct(F("name", STRING), F("metadata", BYTES)))),
        ),
        Struct(
            F("throttle_time_ms", INT32, "2+"),
            F("error_code", INT16),
            F("generation_id", INT32, "0+", -1),
            F("protocol_name", STRING),
            F("leader", STRING),
            F("member_id", STRING),
            F(
                "members",
                Array(
                    Struct(
                        F("member_id", STRING),
                        F("group_instance_id", NSTRING, "5+"),
                        F("metadata", BYTES),
                    )
                ),
            ),
        ),
    ),
    Api(
        12,
        "Heartbeat",
        0,
        3,
        Struct(
            F("group_id", STRING),
            F("generation_id", INT32),
            F("member_id", STRING),
            F("group_instance_id", NSTRING, "3+"),
        ),
        Struct(F("throttle_time_ms", INT32, "1+"), F("error_code", INT16)),
    ),
    Api(
        13,
        "LeaveGroup",
        0,
        3,
        Struct(
            F("group_id", STRING),
            F("member_id", STRING, "0-2"),
            F(
                "members",
                Array(Struct(F("member_id", STRING), F("group_instance_id", NSTRING))),
                "3+",
            ),
        ),
        Struct(
            F("throttle_time_ms", INT32, "1+"),
            F("error_code", INT16),
            F(
                "members",
                Array(
                    Struct(
                        F("member_id", STRING),
                        F("group_instance_id", NSTRING),
                        F("error_code", INT16),
                    )
                ),
                "3+",
            ),
        ),
    ),
    Api(
        14,
        "SyncGroup",
        0,
        3,
        Struct(
            F("group_id", STRING),
            F("generation_id", INT32),
            F("member_id", STRING),
            F("group_instance_id", NSTRING, "3+"),
            F("assignments", Array(Struct(F("member_id", STRING), F("assignment", BYTES)))),
        ),
        Struct(
            F("throttle_time_ms", INT32, "1+"),
            F("error_code", INT16),
            F("assignment", BYTES),
        ),
    ),
    Api(
        15,
        "DescribeGroups",
        0,
        2,
        Struct(F("groups", Array(STRING)), F("include_authorized_operations", BOOL, "3+")),
        Struct(
            F("throttle_time_ms", INT32, "1+"),
            F(
                "groups",
                Array(
                    Struct(
                        F("error_code", INT16),
                        F("group_id", STRING),
                        F("group_state", STRING),
                        F("protocol_type", STRING),
                        F("protocol_data", STRING),
                        F(
                            "members",
                            Array(
                                Struct(
                                    F("member_id", STRING),
                                    F("group_instance_id", NSTRING, "4+"),
                                    F("client_id", STRING),
                                    F("client_host", STRING),
                                    F("member_metadata", BYTES),
                                    F("member_assignment", BYTES),
                                )
                            ),
                        ),
                        F("authorized_operations", INT32, "3+", -(2**31)),
                    )
                ),
            ),
        ),
    ),
    Api(
        16,
        "ListGroups",
        0,
        2,
        Struct(F("states_filter", Array(STRING), "4+")),
        Struct(
            F("throttle_time_ms", INT32, "1+"),
            F("error_code", INT16),
            F("groups", Array(Struct(F("group_id", STRING), F("protocol_type", STRING)))),
        ),
    ),
    Api(
        19,
        "CreateTopics",
        0,
        4,
        Struct(
            F(
                "topics",
                Array(
                    Struct(
                        F("name", STRING),
                        F("num_partitions", INT32),
                        F("replication_factor", INT16),
                        F(
                            "assignments",
                            Array(Struct(F("partition_index", INT32), F("broker_ids", _ints()))),
                        ),
                        F("configs", Array(Struct(F("name", STRING), F("value", NSTRING)))),
                    )
                ),
            ),
            F("timeout_ms", INT32),
            F("validate_only", BOOL, "1+"),
        ),
        Struct(
            F("throttle_time_ms", INT32, "2+"),
            F(
                "topics",
                Array(
                    Struct(
                        F("name", STRING),
                        F("error_code", INT16),
                        F("error_message", NSTRING, "1+"),
                    )
                ),
            ),
        ),
    ),
    Api(
        20,
        "DeleteTopics",
        0,
        3,
        Struct(F("topic_names", Array(STRING)), F("timeout_ms", INT32)),
        Struct(
            F("throttle_time_ms", INT32, "1+"),
            F("responses", Array(Struct(F("name", STRING), F("error_code", INT16)))),
        ),
    ),
    Api(
        32,
        "DescribeConfigs",
        0,
        2,
        Struct(
            F(
                "resources",
                Array(
                    Struct(
                        F("resource_type", INT8),
                        F("resource_name", STRING),
                        F("configuration_keys", Array(STRING, nullable=True)),
                    )
                ),
            ),
            F("include_synonyms", BOOL, "1+"),
        ),
        Struct(
            F("throttle_time_ms", INT32),
            F(
                "results",
                Array(
                    Struct(
                        F("error_code", INT16),
                        F("error_message", NSTRING),
                        F("resource_type", INT8),
                        F("resource_name", STRING),
                        F(
                            "configs",
                            Array(
                                Struct(
                                    F("name", STRING),
                                    F("value", NSTRING),
                                    F("read_only", BOOL),
                                    F("is_default", BOOL, "0"),
                                    F("config_source", INT8, "1+", -1),
                                    F("is_sensitive", BOOL),
                                    F(
                                        "synonyms",
                                        Array(
                                            Struct(
                                                F("name", STRING),
                                                F("value", NSTRING),
                                                F("source", INT8),
                                            )
                                        ),
                                        "1+",
                                    ),
                                )
                            ),
                        ),
                    )
                ),
            ),
        ),
    ),
]
