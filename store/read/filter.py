"""Subscription expressions -> ``wharf.store.model.TagFilter`` (RocketMQ's FilterAPI.build):
tag expressions here, SQL92 property expressions compiled by ``sql_filter``.

Grammar: ``*`` or an empty/blank string subscribes to everything; otherwise ``tag ( || tag )*``
with whitespace around tags ignored. Anything else (``||`` alone, an empty alternative as in
``a || || b``, ``*`` mixed with tags) is refused with InvalidFilterError rather than silently
matching nothing, so a typo in a subscription surfaces at once.
"""

from __future__ import annotations

from wharf.store.codec.hashes import java_string_hash
from wharf.store.errors import InvalidFilterError
from wharf.store.model import TagFilter
from wharf.store.read.sql_filter import SqlFilterError, compile_sql

SUBSCRIBE_ALL = "*"
TAG_SEPARATOR = "||"

MATCH_ALL = TagFilter(tags=frozenset(), codes=frozenset())


def parse_tag_expression(expression: str | None) -> TagFilter:
    if expression is None:
        return MATCH_ALL
    if not isinstance(expression, str):
        raise InvalidFilterError(f"tag expression must be a string, got {type(expression)!r}")
    text = expression.strip()
    if text in ("", SUBSCRIBE_ALL):
        return MATCH_ALL
    tags = []
    for position, part in enumerate(text.split(TAG_SEPARATOR)):
        tag = part.strip()
        if not tag:
            raise InvalidFilterError(
                f"tag expression {expression!r} has an empty alternative (#{position + 1}); "
                "use '*' for all tags or 'tagA || tagB'"
            )
        if tag == SUBSCRIBE_ALL:
            raise InvalidFilterError(
                f"tag expression {expression!r} mixes '*' with tags; use '*' alone"
            )
        if "|" in tag:
            raise InvalidFilterError(
                f"tag expression {expression!r}: tags are separated by '||', not '|'"
            )
        tags.append(tag)
    return TagFilter(tags=frozenset(tags), codes=frozenset(java_string_hash(tag) for tag in tags))


def parse_sql_expression(expression: str) -> TagFilter:
    """A SQL92 property filter (RocketMQ's ExpressionType.SQL92); InvalidFilterError saying
    where the expression is wrong."""
    try:
        predicate = compile_sql(expression)
    except SqlFilterError as exc:
        raise InvalidFilterError(f"SQL92 filter {expression!r}: {exc}") from None
    return TagFilter(tags=frozenset(), codes=frozenset(), sql=predicate, expression=expression)


def tag_filter_for(tags: list[str] | tuple[str, ...] | frozenset[str]) -> TagFilter:
    """A filter for an explicit set of tags (empty = everything)."""
    clean = frozenset(tag for tag in tags if tag)
    if not clean:
        return MATCH_ALL
    return TagFilter(tags=clean, codes=frozenset(java_string_hash(tag) for tag in clean))
