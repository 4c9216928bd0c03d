"""The table of ``apis.py``, continued: transactions (KIP-98, KIP-447's TxnOffsetCommit v3
with the group's generation and member). AddPartitionsToTxn, AddOffsetsToTxn, EndTxn and
TxnOffsetCommit are served up to v3 (v3 flexible): v4+ of AddPartitionsToTxn is the brokers'
batched form and EndTxn v4+/v5 KIP-890's, which a client uses only with Produce v12 (served:
up to 8). DescribeTransactions and ListTransactions (KIP-664) v0, flexible from 0. WriteTxnMarkers
v0-1 (v1 flexible): a coordinator's markers for the partitions another broker group leads.
"""

from __future__ import annotations

from wharf.broker.frontends.kafka.schema import (
    BOOL,
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

__all__ = ["TXN_APIS"]

_ID_PID_EPOCH = (
    F("transactional_id", STRING),
    F("producer_id", INT64),
    F("producer_epoch", INT16),
)
_ERROR_ONLY = Struct(F("throttle_time_ms", INT32), F("error_code", INT16))

TXN_APIS = [
    Api(
        27,
        "WriteTxnMarkers",
        0,
        1,
        Struct(
            F(
                "markers",
                Array(
                    Struct(
                        F("producer_id", INT64),
                        F("producer_epoch", INT16),
                        F("transaction_result", BOOL),
                        F(
                            "topics",
                            Array(Struct(F("name", STRING), F("partition_indexes", Array(INT32)))),
                        ),
                        F("coordinator_epoch", INT32),
                    )
                ),
            ),
        ),
        Struct(
            F(
                "markers",
                Array(
                    Struct(
                        F("producer_id", INT64),
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
                                            )
                                        ),
                                    ),
                                )
                            ),
                        ),
                    )
                ),
            ),
        ),
        flexible_from=1,
    ),
    Api(
        24,
        "AddPartitionsToTxn",
        0,
        3,
        Struct(
            *_ID_PID_EPOCH,
            F("topics", Array(Struct(F("name", STRING), F("partitions", Array(INT32))))),
        ),
        Struct(
            F("throttle_time_ms", INT32),
            F(
                "results",
                Array(
                    Struct(
                        F("name", STRING),
                        F(
                            "results",
                            Array(
                                Struct(
                                    F("partition_index", INT32),
                                    F("partition_error_code", INT16),
                                )
                            ),
                        ),
                    )
                ),
            ),
        ),
        flexible_from=3,
    ),
    Api(
        25,
        "AddOffsetsToTxn",
        0,
        3,
        Struct(*_ID_PID_EPOCH, F("group_id", STRING)),
        _ERROR_ONLY,
        flexible_from=3,
    ),
    Api(
        26,
        "EndTxn",
        0,
        3,
        Struct(*_ID_PID_EPOCH, F("committed", BOOL)),
        _ERROR_ONLY,
        flexible_from=3,
    ),
    Api(
        28,
        "TxnOffsetCommit",
        0,
        3,
        Struct(
            F("transactional_id", STRING),
            F("group_id", STRING),
            F("producer_id", INT64),
            F("producer_epoch", INT16),
            F("generation_id", INT32, "3+", -1),
            F("member_id", STRING, "3+"),
            F("group_instance_id", NSTRING, "3+"),
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
                                    F("committed_leader_epoch", INT32, "2+", -1),
                                    F("committed_metadata", NSTRING),
                                )
                            ),
                        ),
                    )
                ),
            ),
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
                            Array(Struct(F("partition_index", INT32), F("error_code", INT16))),
                        ),
                    )
                ),
            ),
        ),
        flexible_from=3,
    ),
    Api(
        65,
        "DescribeTransactions",
        0,
        0,
        Struct(F("transactional_ids", Array(STRING))),
        Struct(
            F("throttle_time_ms", INT32),
            F(
                "transaction_states",
                Array(
                    Struct(
                        F("error_code", INT16),
                        F("transactional_id", STRING),
                        F("transaction_state", STRING),
                        F("transaction_timeout_ms", INT32),
                        F("transaction_start_time_ms", INT64),
                        F("producer_id", INT64),
                        F("producer_epoch", INT16),
                        F(
                            "topics",
                            Array(Struct(F("topic", STRING), F("partitions", Array(INT32)))),
                        ),
                    )
                ),
            ),
        ),
        flexible_from=0,
    ),
    Api(
        66,
        "ListTransactions",
        0,
        0,
        Struct(F("state_filters", Array(STRING)), F("producer_id_filters", Array(INT64))),
        Struct(
            F("throttle_time_ms", INT32),
            F("error_code", INT16),
            F("unknown_state_filters", Array(STRING)),
            F(
                "transaction_states",
                Array(
                    Struct(
                        F("transactional_id", STRING),
                        F("producer_id", INT64),
                        F("transaction_state", STRING),
                    )
                ),
            ),
        ),
        flexible_from=0,
    ),
]
