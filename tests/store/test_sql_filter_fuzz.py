"""Fuzzing wharf.store.read.sql_filter with hypothesis: arbitrary text only ever raises
SqlFilterError, and generated expressions evaluate without raising to what a plain tree-walking
interpreter of RocketMQ's semantics gives (so the generated code's shortcuts change nothing)."""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from wharf.store.read import sql_filter as sf
from wharf.store.read.sql_filter import SqlFilterError, compile_sql

FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])

NAMES = ["a", "b", "TAGS"]
VALUES = [
    "x",
    "y",
    "5",
    "05",
    "+5",
    "-3",
    "1.5",
    "1e1",
    "NaN",
    "true",
    "TRUE",
    "",
    " 7",
    "3000000000",
    "abc",
    "it's",
    "٦",
]

properties = st.dictionaries(
    st.sampled_from(NAMES), st.sampled_from(VALUES) | st.text(max_size=4), max_size=3
)

# -- a reference interpreter over the parsed tree, written after RocketMQ's Java classes --


class Throw(Exception):
    pass


def ref_value(node: sf._Node, props: dict[str, str]) -> sf.JValue:
    if isinstance(node, sf._Prop):
        return props.get(node.name)
    if isinstance(node, sf._Const | sf._BoolConst):
        return node.value
    if isinstance(node, sf._Neg):
        return sf._neg(ref_value(node.operand, props))
    return ref_bool(node, props)


def java_and(left: bool | None, right: Callable[[], bool | None]) -> bool | None:
    if left is False:
        return False
    value = right()
    if value is False:
        return False
    return None if left is None or value is None else True


def java_or(left: bool | None, right: Callable[[], bool | None]) -> bool | None:
    if left is True:
        return True
    value = right()
    if value is True:
        return True
    return None if left is None or value is None else False


def java_not(value: bool | None) -> bool | None:
    return None if value is None else not value


def ref_bool(node: sf._Node, props: dict[str, str]) -> bool | None:
    if isinstance(node, sf._BoolConst):
        return node.value
    if isinstance(node, sf._Logic):
        combine = java_and if node.op == "AND" else java_or
        result = ref_bool(node.operands[0], props)
        for operand in node.operands[1:]:
            result = combine(result, lambda operand=operand: ref_bool(operand, props))  # type: ignore[misc]
        return result
    if isinstance(node, sf._Not):
        return java_not(ref_bool(node.operand, props))
    if isinstance(node, sf._Cast):
        return None if props.get(node.prop.name) is None else False
    if isinstance(node, sf._IsNull):
        return (ref_value(node.operand, props) is None) != node.negated
    if isinstance(node, sf._In):
        value = props.get(node.prop.name)
        return None if value is None else (value in node.values) != node.negated
    if isinstance(node, sf._Match):
        if not node.pattern:
            return False
        value = ref_value(node.operand, props)
        if not isinstance(value, str) or isinstance(value, bool):
            return False
        found = {
            "contains": node.pattern in value,
            "startswith": value.startswith(node.pattern),
            "endswith": value.endswith(node.pattern),
        }[node.kind]
        return found != node.negated
    assert isinstance(node, sf._Compare)
    if node.op in ("=", "<>"):
        equal = sf._eq(ref_value(node.left, props), ref_value(node.right, props))
        return equal if node.op == "=" else java_not(equal)
    left = ref_value(node.left, props)
    if left is None:
        return None
    order = sf._ord(left, ref_value(node.right, props))
    if order is None:
        return None
    return {"<": order < 0, "<=": order <= 0, ">": order > 0, ">=": order >= 0}[node.op]


def reference_match(expression: str, props: dict[str, str]) -> bool:
    tree = sf._Parser(expression).parse()
    try:
        return ref_bool(tree, props) is True
    except sf._EvalError:
        return False  # RocketMQ's broker logs the exception and does not deliver


# -- generated expressions --

prop = st.sampled_from(NAMES)
integer = st.sampled_from(["0", "5", "7", "20", "3000000000", "5L"])
decimal = st.sampled_from(["1.5", "2.", ".5", "1E1", "2.5e-1"])
string = st.sampled_from(["'x'", "'5'", "''", "'it''s'", "'true'", "'1.5'", "'y'"])
number = integer | decimal | integer.map(lambda text: "-" + text)
numeric_operand = prop | number | prop.map(lambda name: "-" + name)
any_operand = numeric_operand | string | st.sampled_from(["TRUE", "FALSE", "+a"])


def keyword(word: str) -> st.SearchStrategy[str]:
    return st.sampled_from([word, word.lower(), word.capitalize()])


ordered = st.tuples(numeric_operand, st.sampled_from(["<", "<=", ">", ">="]), numeric_operand).map(
    " ".join
)
equality = st.tuples(any_operand, st.sampled_from(["=", "<>"]), any_operand).map(" ".join)
in_list = st.tuples(
    prop,
    st.sampled_from(["IN", "NOT IN", "not in"]),
    st.lists(string, min_size=1, max_size=3).map(lambda items: "(" + ", ".join(items) + ")"),
).map(" ".join)
between = st.tuples(
    numeric_operand, st.sampled_from(["BETWEEN", "NOT BETWEEN"]), number, keyword("AND"), number
).map(" ".join)
matching = st.tuples(
    prop | string,
    st.sampled_from(["CONTAINS", "NOT CONTAINS", "STARTSWITH", "NOT STARTSWITH", "endswith"]),
    string,
).map(" ".join)
is_null = st.tuples(any_operand, st.sampled_from(["IS NULL", "IS NOT NULL", "is not null"])).map(
    " ".join
)
atom = (
    ordered
    | equality
    | in_list
    | between
    | matching
    | is_null
    | prop
    | st.sampled_from(["TRUE", "FALSE", "NULL"])
)


def extend(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return (
        inner.map(lambda e: f"NOT ({e})")
        | inner.map(lambda e: f"NOT {e}")
        | inner.map(lambda e: f"({e})")
        | st.tuples(inner, keyword("AND"), inner).map(" ".join)
        | st.tuples(inner, keyword("OR"), inner).map(" ".join)
        | st.tuples(inner, st.sampled_from(["= TRUE", "= FALSE", "IS NULL"])).map(
            lambda pair: f"({pair[0]}) {pair[1]}"
        )
        | st.tuples(inner, inner).map(lambda pair: f"({pair[0]}) = ({pair[1]})")
        | st.tuples(inner, string).map(lambda pair: f"({pair[0]}) contains {pair[1]}")
    )


expressions = st.recursive(atom, extend, max_leaves=8)


@FUZZ
@given(expressions, st.lists(properties, min_size=1, max_size=4))
def test_generated_expressions_match_the_reference(
    expression: str, messages: list[dict[str, str]]
) -> None:
    try:
        match = compile_sql(expression)
    except SqlFilterError:
        return  # a generated BETWEEN 7 AND 5, 5L = TRUE...: RocketMQ refuses those too
    for props in messages:
        result = match(props)
        assert type(result) is bool
        assert result == reference_match(expression, props), (expression, props)


TOKENS = [
    "a",
    "b",
    "TAGS",
    "NOT",
    "AND",
    "OR",
    "BETWEEN",
    "IN",
    "IS",
    "NULL",
    "TRUE",
    "FALSE",
    "CONTAINS",
    "STARTSWITH",
    "ENDSWITH",
    "=",
    "<>",
    "<",
    "<=",
    ">",
    ">=",
    "(",
    ")",
    ",",
    "+",
    "-",
    "--",
    "/*",
    "*/",
    "'x'",
    "'",
    "''",
    "5",
    "0",
    "1.5",
    ".5",
    "1e3",
    "5L",
    "99999999999999999999",
    "0.0",
    "\n",
    "#",
]


def check_anything(expression: str, messages: list[dict[str, str]]) -> None:
    try:
        match = compile_sql(expression)
    except SqlFilterError as error:
        assert error.position is None or 0 <= error.position <= max(
            len(expression), sf.MAX_EXPRESSION_LENGTH
        )
        return
    for props in messages:
        result = match(props)
        assert type(result) is bool
        assert result == reference_match(expression, props), (expression, props)


@FUZZ
@given(st.text(max_size=60), st.lists(properties, max_size=3))
def test_random_text_only_raises_sql_filter_error(
    expression: str, messages: list[dict[str, str]]
) -> None:
    check_anything(expression, messages)


@FUZZ
@given(st.lists(st.sampled_from(TOKENS), max_size=14), st.lists(properties, max_size=3))
def test_token_soup_only_raises_sql_filter_error(
    tokens: list[str], messages: list[dict[str, str]]
) -> None:
    check_anything(" ".join(tokens), messages)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["(", "NOT ", "- ", "+", "NOT (", ")"]), max_size=200))
def test_deep_nesting_is_refused_cleanly(prefix: list[str]) -> None:
    expression = "".join(prefix) + "a IS NULL" + ")" * prefix.count("(")
    check_anything(expression, [{}, {"a": "1"}])
