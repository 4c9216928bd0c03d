from __future__ import annotations

import pytest
from wharf.store.codec.hashes import java_string_hash
from wharf.store.errors import InvalidFilterError, InvalidMessageError
from wharf.store.read.filter import parse_tag_expression


@pytest.mark.parametrize("expression", [None, "", "   ", "*", " * "])
def test_star_and_empty_match_everything(expression: str | None) -> None:
    tag_filter = parse_tag_expression(expression)
    assert tag_filter.match_all
    assert tag_filter.codes == frozenset()


def test_alternatives_are_trimmed_and_hashed_like_java() -> None:
    tag_filter = parse_tag_expression("  TagA ||TagB|| TagA ")
    assert tag_filter.tags == {"TagA", "TagB"}
    assert tag_filter.codes == {java_string_hash("TagA"), java_string_hash("TagB")}
    assert java_string_hash("TagA") == 2598919  # "TagA".hashCode() in Java
    assert not tag_filter.match_all


@pytest.mark.parametrize("expression", ["||", "a ||", "|| a", "a || || b", "a || *", "a | b"])
def test_garbage_is_refused_with_an_invalid_argument_error(expression: str) -> None:
    with pytest.raises(InvalidFilterError) as info:
        parse_tag_expression(expression)
    assert isinstance(info.value, InvalidMessageError)
    assert repr(expression) in str(info.value)
