"""Subscription expressions -> store TagFilter: tags (``*`` or ``tagA || tagB``) and SQL92
property expressions. The grammars and Java's String.hashCode live in the store
(``wharf.store.read.filter``, ``wharf.store.read.sql_filter``); the broker only caches parsed
filters, because every pull of a subscription repeats the same expression."""

from __future__ import annotations

from functools import lru_cache

from wharf.broker.config import BrokerConfig
from wharf.store import MATCH_ALL, parse_sql_expression
from wharf.store import parse_tag_expression as _parse
from wharf.store.errors import InvalidFilterError
from wharf.store.model import TagFilter

__all__ = ["MATCH_ALL", "filter_of", "parse_filter", "parse_tag_expression"]

SQL92 = "SQL92"

MAX_EXPRESSION_LENGTH = 4096


@lru_cache(maxsize=1024)
def parse_tag_expression(expression: str) -> TagFilter:
    """Raises store.errors.InvalidFilterError (INVALID_ARGUMENT) for a malformed expression."""
    if len(expression) > MAX_EXPRESSION_LENGTH:
        raise InvalidFilterError(
            f"tag expression is {len(expression)} characters; the limit is {MAX_EXPRESSION_LENGTH}"
        )
    return _parse(expression)


@lru_cache(maxsize=1024)
def _parse_sql(expression: str) -> TagFilter:
    return parse_sql_expression(expression)


def parse_filter(expression: str, sql: bool, property_filter: bool = True) -> TagFilter:
    """A tag expression, or with ``sql`` a SQL92 one (refused unless ``property_filter``, the
    broker's enablePropertyFilter). InvalidFilterError for a malformed or refused one."""
    if not sql:
        return parse_tag_expression(expression)
    if not property_filter:
        raise InvalidFilterError(
            "SQL92 filters are off on this broker (enablePropertyFilter = false): subscribe "
            "by tag, or turn the setting on"
        )
    if len(expression) > MAX_EXPRESSION_LENGTH:
        raise InvalidFilterError(
            f"SQL92 expression is {len(expression)} characters; the limit is "
            f"{MAX_EXPRESSION_LENGTH}"
        )
    return _parse_sql(expression)


def filter_of(tag_expression: str, sql_expression: str, config: BrokerConfig) -> TagFilter:
    """wharf.v1's pair of fields: a SQL92 expression when set (the tags then "" or "*"),
    else the tag expression."""
    if not sql_expression:
        return parse_tag_expression(tag_expression)
    if tag_expression.strip() not in ("", "*"):
        raise InvalidFilterError(
            "set either a tag expression or a SQL92 expression (tags are the property TAGS "
            "inside it), not both"
        )
    return parse_filter(sql_expression, sql=True, property_filter=config.enable_property_filter)
