"""The table of ``apis.py``, continued: the admin APIs beyond topics (configs, partitions,
groups, committed offsets, ACLs, SCRAM credentials), in the same schema language and under the
same rules (only non-flexible versions are served, except where a note says otherwise)."""

from __future__ import annotations

from wharf.broker.frontends.kafka.schema import (
    BOOL,
    BYTES,
    INT8,
    INT16,
    INT32,
    NSTRING,
    STRING,
    Api,
    Array,
    F,
    Struct,
)

__all__ = ["ADMIN_APIS"]

LITERAL = 3  # a pattern type absent before v1 is LITERAL


def _resource_rows() -> Array:
    """AlterConfigs' and IncrementalAlterConfigs' answer: one row per resource."""
    return Array(
        Struct(
            F("error_code", INT16),
            F("error_message", NSTRING),
            F("resource_type", INT8),
            F("resource_name", STRING),
        )
    )


def _acl_filter() -> tuple[F, ...]:
    return (
        F("resource_type_filter", INT8),
        F("resource_name_filter", NSTRING),
        F("pattern_type_filter", INT8, "1+", LITERAL),
        F("principal_filter", NSTRING),
        F("host_filter", NSTRING),
        F("operation", INT8),
        F("permission_type", INT8),
    )


ADMIN_APIS = [
    Api(
        29,
        "DescribeAcls",
        0,
        1,
        Struct(*_acl_filter()),
        Struct(
            F("throttle_time_ms", INT32),
            F("error_code", INT16),
            F("error_message", NSTRING),
            F(
                "resources",
                Array(
                    Struct(
                        F("resource_type", INT8),
                        F("resource_name", STRING),
                        F("pattern_type", INT8, "1+", LITERAL),
                        F(
                            "acls",
                            Array(
                                Struct(
                                    F("principal", STRING),
                                    F("host", STRING),
                                    F("operation", INT8),
                                    F("permission_type", INT8),
                                )
                            ),
                        ),
                    )
                ),
            ),
        ),
    ),
    Api(
        30,
        "CreateAcls",
        0,
        1,
        Struct(
            F(
                "creations",
                Array(
                    Struct(
                        F("resource_type", INT8),
                        F("resource_name", STRING),
                        F("resource_pattern_type", INT8, "1+", LITERAL),
                        F("principal", STRING),
                        F("host", STRING),
                        F("operation", INT8),
                        F("permission_type", INT8),
                    )
                ),
            )
        ),
        Struct(
            F("throttle_time_ms", INT32),
            F("results", Array(Struct(F("error_code", INT16), F("error_message", NSTRING)))),
        ),
    ),
    Api(
        31,
        "DeleteAcls",
        0,
        1,
        Struct(F("filters", Array(Struct(*_acl_filter())))),
        Struct(
            F("throttle_time_ms", INT32),
            F(
                "filter_results",
                Array(
                    Struct(
                        F("error_code", INT16),
                        F("error_message", NSTRING),
                        F(
                            "matching_acls",
                            Array(
                                Struct(
                                    F("error_code", INT16),
                                    F("error_message", NSTRING),
                                    F("resource_type", INT8),
                                    F("resource_name", STRING),
                                    F("pattern_type", INT8, "1+", LITERAL),
                                    F("principal", STRING),
                                    F("host", STRING),
                                    F("operation", INT8),
                                    F("permission_type", INT8),
                                )
                            ),
                        ),
                    )
                ),
            ),
        ),
    ),
    Api(
        33,
        "AlterConfigs",
        0,
        1,
        Struct(
            F(
                "resources",
                Array(
                    Struct(
                        F("resource_type", INT8),
                        F("resource_name", STRING),
                        F("configs", Array(Struct(F("name", STRING), F("value", NSTRING)))),
                    )
                ),
            ),
            F("validate_only", BOOL),
        ),
        Struct(F("throttle_time_ms", INT32), F("responses", _resource_rows())),
    ),
    Api(
        37,
        "CreatePartitions",
        0,
        1,
        Struct(
            F(
                "topics",
                Array(
                    Struct(
                        F("name", STRING),
                        F("count", INT32),
                        F(
                            "assignments",
                            Array(Struct(F("broker_ids", Array(INT32))), nullable=True),
                        ),
                    )
                ),
            ),
            F("timeout_ms", INT32),
            F("validate_only", BOOL),
        ),
        Struct(
            F("throttle_time_ms", INT32),
            F(
                "results",
                Array(
                    Struct(F("name", STRING), F("error_code", INT16), F("error_message", NSTRING))
                ),
            ),
        ),
    ),
    Api(
        42,
        "DeleteGroups",
        0,
        1,
        Struct(F("groups_names", Array(STRING))),
        Struct(
            F("throttle_time_ms", INT32),
            F("results", Array(Struct(F("group_id", STRING), F("error_code", INT16)))),
        ),
    ),
    Api(
        44,
        "IncrementalAlterConfigs",
        0,
        1,  # v1 is flexible (no field changes): the Java client's first choice
        Struct(
            F(
                "resources",
                Array(
                    Struct(
                        F("resource_type", INT8),
                        F("resource_name", STRING),
                        F(
                            "configs",
                            Array(
                                Struct(
                                    F("name", STRING),
                                    F("config_operation", INT8),
                                    F("value", NSTRING),
                                )
                            ),
                        ),
                    )
                ),
            ),
            F("validate_only", BOOL),
        ),
        Struct(F("throttle_time_ms", INT32), F("responses", _resource_rows())),
        flexible_from=1,
    ),
    Api(
        47,
        "OffsetDelete",
        0,
        0,
        Struct(
            F("group_id", STRING),
            F(
                "topics",
                Array(
                    Struct(
                        F("name", STRING),
                        F("partitions", Array(Struct(F("partition_index", INT32)))),
                    )
                ),
            ),
        ),
        Struct(
            F("error_code", INT16),
            F("throttle_time_ms", INT32),
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
        50,
        "DescribeUserScramCredentials",
        0,
        0,  # every version is flexible
        Struct(F("users", Array(Struct(F("name", STRING)), nullable=True))),
        Struct(
            F("throttle_time_ms", INT32),
            F("error_code", INT16),
            F("error_message", NSTRING),
            F(
                "results",
                Array(
                    Struct(
                        F("user", STRING),
                        F("error_code", INT16),
                        F("error_message", NSTRING),
                        F(
                            "credential_infos",
                            Array(Struct(F("mechanism", INT8), F("iterations", INT32))),
                        ),
                    )
                ),
            ),
        ),
        flexible_from=0,
    ),
    Api(
        51,
        "AlterUserScramCredentials",
        0,
        0,  # every version is flexible
        Struct(
            F("deletions", Array(Struct(F("name", STRING), F("mechanism", INT8)))),
            F(
                "upsertions",
                Array(
                    Struct(
                        F("name", STRING),
                        F("mechanism", INT8),
                        F("iterations", INT32),
                        F("salt", BYTES),
                        F("salted_password", BYTES),
                    )
                ),
            ),
        ),
        Struct(
            F("throttle_time_ms", INT32),
            F(
                "results",
                Array(
                    Struct(F("user", STRING), F("error_code", INT16), F("error_message", NSTRING))
                ),
            ),
        ),
        flexible_from=0,
    ),
]
