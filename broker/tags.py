"""Tag expressions (``*`` or ``tagA || tagB``) -> store TagFilter. The grammar and Java's
String.hashCode live in the store (``wharf.store.read.filter``); the broker only caches parsed filters,
because every pull of a subscription repeats the same expression."""

from __future__ import annotations

from functools import lru_cache

from wharf.store.errors import InvalidFilterError
from wharf.store.model import TagFilter
from wharf.store.read.filter import MATCH_ALL
from wharf.store.read.filter import parse_tag_expression as _parse

__all__ = ["MATCH_ALL", "parse_tag_expression"]

MAX_EXPRESSION_LENGTH = 4096


@lru_cache(maxsize=1024)
def parse_tag_expression(expression: str) -> TagFilter:
    """Raises store.errors.InvalidFilterError (INVALID_ARGUMENT) for a malformed expression."""
    if len(expression) > MAX_EXPRESSION_LENGTH:
        raise InvalidFilterError(
            f"tag expression is {len(expression)} characters; the limit is {MAX_EXPRESSION_LENGTH}"
        )
    return _parse(expression)
