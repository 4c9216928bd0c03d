"""RocketMQ's SQL92 property filter (wharf.store.read.sql_filter): a table of (expression,
properties, expected match) over every operator, RocketMQ's NULL and type-coercion semantics,
and the compile errors with their positions.

Cases marked "RocketMQ" restate expectations of apache/rocketmq's filter/src/test/java/org/apache/
rocketmq/filter/ExpressionTest.java and ParserTest.java.
"""

from __future__ import annotations

import pytest
from wharf.store.read.sql_filter import (
    MAX_DEPTH,
    MAX_EXPRESSION_LENGTH,
    SqlFilterError,
    compile_sql,
)

P = dict[str, str]

# (expression, properties, expected)
CASES: list[tuple[str, P, bool]] = [
    # --- ordered comparisons with integer literals: the property is parsed like Integer.valueOf
    ("a > 5", {"a": "10"}, True),
    ("a > 5", {"a": "5"}, False),
    ("a > 5", {}, False),  # NULL
    ("a > 5", {"a": "abc"}, False),  # RocketMQ throws: not delivered
    ("a >= 5", {"a": "5"}, True),
    ("a >= 5", {"a": "4"}, False),
    ("a < 5", {"a": "4"}, True),
    ("a < 5", {"a": "-7"}, True),
    ("a <= 5", {"a": "5"}, True),
    ("a <= 5", {"a": "6"}, False),
    ("a > 5", {"a": "+6"}, True),
    ("a > 5", {"a": "007"}, True),
    ("a > 5", {"a": " 6"}, False),  # Integer.valueOf refuses spaces
    ("a > 5", {"a": "6.0"}, False),  # ... and decimals
    ("a > 5", {"a": "1_000"}, False),  # ... and Python's digit separators
    ("a > 5", {"a": "3000000000"}, False),  # beyond an Integer: RocketMQ throws
    ("a < 5", {"a": "3000000000"}, False),
    ("NOT (a < 5)", {"a": "3000000000"}, False),  # the throw is not negated
    ("a > 3000000000", {"a": "3000000001"}, True),  # a Long literal parses the value as a Long
    ("a < 3000000000", {"a": "5"}, True),
    ("a = 9223372036854775807", {"a": "9223372036854775807"}, True),
    ("a < 9223372036854775807", {"a": "9223372036854775808"}, False),
    ("a = 5L", {"a": "5"}, True),
    ("a = 5l", {"a": "5"}, True),
    ("a > -5", {"a": "-4"}, True),
    ("a = -5", {"a": "-5"}, True),
    ("a > --5", {"a": "6"}, True),  # no newline after '--': two minus signs, as in RocketMQ
    ("a > - - 5", {"a": "4"}, False),
    ("a > +5", {"a": "6"}, True),
    ("5 < a", {"a": "6"}, True),
    ("5 < a", {}, False),
    # --- equality with numbers is numeric too
    ("a = 5", {"a": "5"}, True),
    ("a = 5", {"a": "05"}, True),
    ("a = 5", {"a": "+5"}, True),
    ("a = 5", {"a": "5.0"}, False),  # throws in RocketMQ
    ("a <> 5", {"a": "6"}, True),
    ("a <> 5", {"a": "5"}, False),
    ("a <> 5", {}, False),
    ("a <> 5", {"a": "x"}, False),  # throws: NOT of a throw is no match either
    ("NOT (a = 5)", {"a": "x"}, False),
    ("5 = a", {"a": "5"}, True),
    ("5 = a", {}, False),
    ("5 <> a", {}, True),  # literal = missing property is FALSE, not NULL (RocketMQ)
    ("1 = 1.0", {}, True),
    # --- a throw ends evaluation, which is left to right and short-circuits
    ("a = 5 OR b = 'x'", {"a": "abc", "b": "x"}, False),
    ("b = 'x' OR a = 5", {"a": "abc", "b": "x"}, True),
    ("b = 'y' AND a = 5", {"a": "abc", "b": "x"}, False),
    ("NOT (b = 'y' AND a = 5)", {"a": "abc", "b": "x"}, True),  # FALSE AND ... stops early
    ("NOT (b = 'x' AND a = 5)", {"a": "abc", "b": "x"}, False),  # reaches the throw
    # --- decimal literals: the property is parsed like Double.valueOf
    ("a > 5.5", {"a": "6"}, True),
    ("a > 5.5", {"a": "5.5"}, False),
    ("a >= 5.5", {"a": "5.5"}, True),
    ("a > 5.5", {"a": "1e3"}, True),
    ("a > 5.5", {"a": " 6 "}, True),  # Double.valueOf trims
    ("a > 5.5", {"a": "6f"}, True),
    ("a > 5.5", {"a": "6d"}, True),
    ("a > 5.5", {"a": "0x1p3"}, True),  # 8.0
    ("a > 5.5", {"a": "0x10"}, False),  # a Java hex double needs its p exponent
    ("a > 5.5", {"a": "+.7e1F"}, True),
    ("a > 5.5", {"a": "1e"}, False),
    ("a > 5.5", {"a": "Infinity"}, True),
    ("a < 5.5", {"a": "-Infinity"}, True),
    ("a > 5.5", {"a": "NaN"}, True),  # Double.compareTo puts NaN above everything
    ("a < 5.5", {"a": "NaN"}, False),
    ("a > 5.5", {"a": "abc"}, False),
    ("a > 5.5", {"a": "nan"}, False),  # Java's spelling only
    ("a > 5.5", {"a": "6_0"}, False),
    ("a > 5.5", {"a": "٦"}, False),  # Arabic-Indic six: Double.valueOf wants ASCII digits
    ("a = 6", {"a": "٦"}, True),  # ... but Integer.valueOf takes any decimal digit
    ("a = 1.5", {"a": "1.50"}, True),
    ("a = 1E2", {"a": "100"}, True),
    ("a > .5", {"a": "1"}, True),
    ("a > 5.", {"a": "6"}, True),
    ("a > 3.14", {"a": "3.1415"}, True),  # RocketMQ testEvaluate_floatNumber
    ("a > 3.1E10", {"a": "3.1415E10"}, True),  # RocketMQ testEvaluate_exponent
    ("a between 1 and 2.5", {"a": "2"}, True),
    ("a between 1 and 2.5", {"a": "2.2"}, False),  # a >= 1 parses '2.2' as an Integer: throws
    # --- two properties: ordered comparisons parse both as doubles, = compares strings
    ("a > b", {"a": "10", "b": "20"}, False),  # RocketMQ testEvaluate_twoVariable
    ("a > b", {"a": "20", "b": "10"}, True),  # RocketMQ testEvaluate_twoVariableGt
    ("a > b", {"a": "2.5", "b": "1e0"}, True),
    ("a > b", {"a": "x", "b": "1"}, False),
    ("a > b", {"a": "1"}, False),
    ("a = b", {"a": "3.14", "b": "3.14"}, True),  # RocketMQ testEvaluate_stringCompare
    ("a <> b", {"a": "3.14", "b": "3.14"}, False),
    ("a <> b", {"a": "3.14", "b": "3.141"}, True),
    ("a = b", {"a": "1.0", "b": "1"}, False),
    ("a = b", {}, True),  # two nulls are equal in RocketMQ's '='
    ("a = b", {"a": "x"}, False),
    ("a = b", {"b": "x"}, False),  # NULL
    ("a <> b", {}, False),
    ("a <> b", {"a": "x"}, True),
    ("a <> b", {"b": "x"}, False),
    # --- strings
    ("a = 'x'", {"a": "x"}, True),
    ("a = 'x'", {"a": "X"}, False),
    ("a = 'x'", {}, False),
    ("a <> 'x'", {"a": "y"}, True),
    ("a <> 'x'", {"a": "x"}, False),
    ("a <> 'x'", {}, False),
    ("'x' = a", {"a": "x"}, True),
    ("'x' = a", {}, False),
    ("'x' <> a", {}, True),  # the asymmetry again
    ("'x' <> a", {"a": "x"}, False),
    ("'x' = 'x'", {}, True),
    ("'x' = 'y'", {}, False),
    ("a = 'it''s'", {"a": "it's"}, True),
    ("a = ''''", {"a": "'"}, True),
    ("a = ''", {"a": ""}, True),
    ("a = ''", {}, False),
    ("a = 'caf\u00e9 \u6f22'", {"a": "caf\u00e9 \u6f22"}, True),
    ("a = 'x' -- trailing note", {"a": "x"}, True),
    ("TAGS is not null and TAGS='''''tag'''''", {"TAGS": "''tag''"}, True),  # RocketMQ
    ("a = '5'", {"a": "5"}, True),
    ("a = '5'", {"a": "05"}, False),  # strings compare as strings
    # --- booleans
    ("a = TRUE", {"a": "true"}, True),
    ("a = TRUE", {"a": "TrUe"}, True),
    ("a = TRUE", {"a": "yes"}, False),
    ("a = FALSE", {"a": "yes"}, True),  # Boolean.valueOf: anything but 'true' is false
    ("a = TRUE", {}, False),
    ("a=TRUE OR b=FALSE", {"a": "true", "b": "false"}, True),  # RocketMQ testEvaluate_boolean
    ("a=TRUE OR b=FALSE", {"a": "false", "b": "true"}, False),
    ("TRUE = a", {"a": "true"}, False),  # RocketMQ throws (casts the Boolean to a String)
    ("TRUE = a", {}, False),
    ("TRUE", {}, True),
    ("FALSE", {}, False),
    ("NULL", {}, False),
    ("NOT TRUE", {}, False),
    ("NOT FALSE", {}, True),
    ("NOT NULL", {}, False),
    ("TRUE = TRUE", {}, True),
    ("TRUE <> FALSE", {}, True),
    ("1 = TRUE", {}, False),
    ("(a = 'x') = TRUE", {"a": "x"}, True),
    ("(a = 'x') = TRUE", {"a": "y"}, False),
    ("(a = 'x') = FALSE", {"a": "y"}, True),
    ("(a = 'x') = FALSE", {}, False),
    ("FALSE = (a = 'x')", {}, False),
    ("(a = 'x') = (b = 'y')", {}, True),  # NULL = NULL
    ("(a = 'x') = 1", {"a": "x"}, False),
    # --- a bare property is a boolean cast: NULL when missing, FALSE when set
    ("a", {"a": "true"}, False),
    ("a", {}, False),
    ("NOT a", {"a": "x"}, True),
    ("NOT a", {}, False),
    ("a OR b = 'x'", {"b": "x"}, True),
    ("NOT (a AND b = 'x')", {"a": "1"}, True),  # FALSE AND ... is FALSE
    # --- NOT binds tighter than comparisons (RocketMQ's unaryExpr)
    ("NOT a = TRUE", {"a": "true"}, True),  # (NOT a) = TRUE: NOT FALSE = TRUE
    ("NOT (a = TRUE)", {"a": "true"}, False),
    ("NOT a IS NULL", {}, True),  # (NOT a) IS NULL
    ("NOT (a IS NULL)", {}, False),
    ("NOT (a = 'x') AND b = 'y'", {"a": "z", "b": "y"}, True),
    # --- NULL / three-valued logic
    ("a IS NULL", {}, True),  # RocketMQ testEvaluate_isNullTrue
    ("a IS NULL", {"a": ""}, False),
    ("a IS NULL", {"a": "2"}, False),
    ("a IS NOT NULL", {"a": "2"}, True),
    ("a IS NOT NULL", {"abc": "2"}, False),
    ("a is null OR a='hello'", {}, True),  # RocketMQ testEvaluate_nullOr
    ("a is null OR a='hello'", {"a": "hello"}, True),
    ("a is null OR a='hello'", {"a": "abc"}, False),
    ("a is not null and a='hello'", {"a": "hello"}, True),  # RocketMQ testEvaluate_equal
    ("a is not null and a='hello'", {}, False),
    ("NOT (a = 'x')", {}, False),  # NOT NULL is NULL
    ("a = 'x' OR TRUE", {}, True),  # NULL OR TRUE
    ("a = 'x' OR FALSE", {}, False),
    ("NOT (a = 'x' OR FALSE)", {}, False),
    ("NOT (a = 'x' AND FALSE)", {}, True),  # NULL AND FALSE is FALSE
    ("NOT (FALSE AND a = 'x')", {}, True),
    ("NOT (a = 'x' AND TRUE)", {}, False),
    ("NOT (a = 'x' OR TRUE)", {}, False),
    ("(a = 'x' AND b = 'y') IS NULL", {"b": "y"}, True),
    ("(a = 'x' AND b = 'y') IS NULL", {"b": "z"}, False),
    ("(a = 'x' OR b = 'y') IS NULL", {"b": "z"}, True),
    ("NULL IS NULL", {}, True),
    ("5 IS NULL", {}, False),
    ("'x' IS NOT NULL", {}, True),
    ("-a IS NULL", {"a": "5"}, True),  # the negation of a string is null
    ("a = -b", {}, True),
    ("a = -b", {"a": "1"}, False),
    ("a > -b", {"a": "1", "b": "1"}, False),
    # --- BETWEEN
    ("a between 2 and 10", {"a": "2"}, True),  # RocketMQ testEvaluate_betweenTrue
    ("a between 2 and 10", {"a": "10"}, True),
    ("a between 2 and 10", {"a": "3"}, True),
    ("a between 2 and 10", {"a": "1"}, False),  # RocketMQ testEvaluate_betweenFalse
    ("a between 2 and 10", {"a": "11"}, False),
    ("a between 2 and 10", {}, False),
    ("a between 0 and 100", {"a": "abc"}, False),  # RocketMQ testEvaluate_stringCompare
    ("key is not null and key between 0 and 100", {"key": "con"}, False),
    ("a between up and low", {"a": "3.14"}, False),
    ("a between up and low", {"a": "3.14", "up": "up", "low": "low"}, False),
    ("a between up and low", {"a": "3", "up": "1", "low": "5"}, True),
    ("a not between 2 and 10", {"a": "1"}, True),  # RocketMQ testEvaluate_notBetweenTrue
    ("a not between 2 and 10", {"a": "11"}, True),
    ("a not between 2 and 10", {"a": "2"}, False),  # RocketMQ testEvaluate_notBetweenFalse
    ("a not between 2 and 10", {"a": "10"}, False),
    ("a not between 2 and 10", {}, False),
    ("NOT (a between 2 and 10)", {"a": "abc"}, False),
    ("NOT (a between 2 and 10)", {"a": "1"}, True),
    ("a between -5 and -1", {"a": "-3"}, True),
    ("a between 5 and -1", {"a": "3"}, False),  # a negation is no literal: not checked
    ("a not between 5 and 1", {"a": "3"}, True),  # NOT BETWEEN is never checked
    ("a between 1 and 1", {"a": "1"}, True),
    ("a BETWEEN 1 AND 3 AND b = 'x'", {"a": "2", "b": "x"}, True),
    ("a between 1.5 and 2.5", {"a": "2"}, True),
    # --- IN
    ("a in ('3', '4', '5')", {"a": "3"}, True),  # RocketMQ testEvaluate_inTrue
    ("a in ('3', '4', '5')", {"a": "5"}, True),
    ("a in ('3', '4', '5')", {"a": "8"}, False),  # RocketMQ testEvaluate_inFalse
    ("a in ('3', '4', '5')", {}, False),
    ("a in ('3', '4', '5')", {"a": "03"}, False),
    ("a not in ('3', '4', '5')", {"a": "8"}, True),  # RocketMQ testEvaluate_notInTrue
    ("a not in ('3', '4', '5')", {"a": "4"}, False),  # RocketMQ testEvaluate_notInFalse
    ("a not in ('3', '4', '5')", {}, False),
    ("NOT (a IN ('x'))", {}, False),
    ("NOT (a IN ('x'))", {"a": "y"}, True),
    ("TAGS IN ('a', 'b')", {"TAGS": "b"}, True),
    ("(a) IN ('x')", {"a": "x"}, True),
    ("+a IN ('x')", {"a": "x"}, True),
    ("a IN ('it''s', 'x y')", {"a": "it's"}, True),
    ("(a not in ('6', '4', '5')) or (b in ('3', '4', '5'))", {"a": "6", "b": "3"}, True),
    ("(a not in ('6', '4', '5')) or (b in ('3', '4', '5'))", {"a": "6", "b": "7"}, False),
    # --- CONTAINS, STARTSWITH, ENDSWITH (RocketMQ 5.x), all from ExpressionTest
    ("value contains 'x'", {"value": "axb"}, True),
    ("value startswith 'ax'", {"value": "axb"}, True),
    ("value endswith 'xb'", {"value": "axb"}, True),
    ("value not contains 'x'", {"value": "axb"}, False),
    ("value not startswith 'ax'", {"value": "axb"}, False),
    ("value not endswith 'xb'", {"value": "axb"}, False),
    ("value contains 'x'", {"value": "abb"}, False),
    ("value startswith 'x'", {"value": "abb"}, False),
    ("value endswith 'x'", {"value": "abb"}, False),
    ("value not contains 'x'", {"value": "abb"}, True),
    ("value not startswith 'x'", {"value": "abb"}, True),
    ("value not endswith 'x'", {"value": "abb"}, True),
    ("value contains ''", {"value": "axb"}, False),  # an empty pattern never matches...
    ("value startswith ''", {"value": "axb"}, False),
    ("value endswith ''", {"value": "axb"}, False),
    ("value not contains ''", {"value": "axb"}, False),  # ... negated or not
    ("value not startswith ''", {"value": "axb"}, False),
    ("value not endswith ''", {"value": "axb"}, False),
    ("value contains 'x'", {}, False),  # missing: FALSE, not NULL...
    ("value not contains 'x'", {}, False),
    ("value not startswith 'x'", {}, False),
    ("value not endswith 'x'", {}, False),
    ("NOT (value contains 'x')", {}, True),  # ... so its negation is TRUE
    ("'axb' contains 'x'", {}, True),
    ("'axb' startswith 'ax'", {}, True),
    ("'axb' endswith 'xb'", {}, True),
    ("'axb' not contains 'x'", {}, False),
    ("'axb' not contains 'u'", {}, True),
    ("'axb' not startswith 'u'", {}, True),
    ("'axb' not endswith 'u'", {}, True),
    ("'axb' contains ''", {}, False),
    ("'axb' not contains ''", {}, False),
    ("' ' contains ' '", {}, True),
    ("' ' not endswith ' '", {}, False),
    ("'axb' contains '.'", {}, False),  # no pattern language
    ("'axb' not startswith '.'", {}, True),
    ("'s' contains '\\'", {}, False),
    ("value contains 'X'", {"value": "axb"}, False),  # case-sensitive
    ("value contains 'it''s'", {"value": "so it's done"}, True),
    ("5 contains '5'", {}, False),  # not a string
    ("(value = 'x') contains 'x'", {"value": "x"}, False),
    ("NOT ((value = 'x') contains 'x')", {}, True),
    ("-value contains '1'", {"value": "1"}, False),
    ("NOT ((a = 5) contains 'x')", {"a": "abc"}, False),  # the operand is evaluated: throws
    ("NOT ((a = 5) contains '')", {"a": "abc"}, True),  # an empty pattern skips the operand
    (
        "a not in ('4', '4', '5') and b between 3 and 10 and c not contains 'axbc'",
        {"a": "3", "b": "3", "c": "axbdc"},
        True,
    ),  # RocketMQ testContainsAllInOne
    (
        "a not in ('4', '4', '5') and b between 3 and 10 and c not startswith 'axbc'",
        {"a": "3", "b": "3", "c": "axbdc"},
        True,
    ),
    (
        "a not in ('4', '4', '5') and b between 3 and 10 and c not endswith 'axbc'",
        {"a": "3", "b": "3", "c": "axbdc"},
        True,
    ),
    # --- keywords are case-insensitive, property names are not
    ("a=3 and b<>4 And c>5 AND d<=4", {"a": "3", "b": "5", "c": "6", "d": "1"}, True),  # RocketMQ
    ("a=3 and b<>4 And c>5 AND d<=4", {"a": "4", "b": "5", "c": "6", "d": "1"}, False),
    ("a=3 or b<>4 Or c>5 OR d<=4", {"a": "3"}, True),  # RocketMQ testEvaluate_orTrue
    ("a=3 or b<>4 Or c>5 OR d<=4", {"a": "4", "b": "5"}, True),
    ("a=3 or b<>4 Or c>5 OR d<=4", {"a": "4", "b": "4", "c": "6"}, True),
    ("a=3 or b<>4 Or c>5 OR d<=4", {"a": "4", "b": "4", "c": "3", "d": "2"}, True),
    ("a=3 or b<>4 Or c>5 OR d<=4", {"a": "4", "b": "4", "c": "3", "d": "10"}, False),
    ("a iS nOt NuLl", {"a": "1"}, True),
    ("a BeTwEeN 1 aNd 3", {"a": "2"}, True),
    ("a nOt In ('x')", {"a": "y"}, True),
    ("a CoNtAiNs 'x'", {"a": "x"}, True),
    ("tRuE", {}, True),
    ("A = 'x'", {"a": "x"}, False),
    ("tags = 'x'", {"TAGS": "x"}, False),
    ("TAGS = 'x'", {"TAGS": "x"}, True),
    ("NOTE = 'x'", {"NOTE": "x"}, True),  # a keyword prefix is still an identifier
    ("$a_1 = 'x'", {"$a_1": "x"}, True),
    ("_ = 'x'", {"_": "x"}, True),
    ("now >= 5", {"now": "6"}, True),  # 'now' is a plain property in RocketMQ's grammar
    # --- precedence: AND over OR, left to right, parentheses
    ("a = 'x' OR b = 'y' AND c = 'z'", {"a": "x"}, True),
    ("a = 'x' OR b = 'y' AND c = 'z'", {"b": "y"}, False),
    ("a = 'x' OR b = 'y' AND c = 'z'", {"b": "y", "c": "z"}, True),
    ("(a = 'x' OR b = 'y') AND c = 'z'", {"a": "x"}, False),
    ("(a = 'x' OR b = 'y') AND c = 'z'", {"a": "x", "c": "z"}, True),
    ("a = 'x' AND (b = 'y' OR c = 'z')", {"a": "x", "c": "z"}, True),
    ("((((a = 'x'))))", {"a": "x"}, True),
    ("a > 1 = TRUE", {"a": "2"}, True),  # (a > 1) = TRUE: comparisons bind tighter than '='
    ("a = 1 IS NULL", {}, True),  # (a = 1) IS NULL
    ("b = a IN ('x')", {"a": "x", "b": "true"}, True),  # b = (a IN ('x'))
    # --- comments and whitespace
    ("a = 1 /* note */ AND b = 2", {"a": "1", "b": "2"}, True),
    ("/* lead */ a = 1", {"a": "1"}, True),
    ("a = 1 -- note\n AND b = 2", {"a": "1"}, False),
    ("a = 1 -- note\n AND b = 2", {"a": "1", "b": "2"}, True),
    ("a = 1 -- note\r\n", {"a": "1"}, True),
    ("a = 1 --", {"a": "1"}, True),
    ("a\t=\n'x'\r\f", {"a": "x"}, True),
    ("a/**/=/**/1", {"a": "1"}, True),
]


@pytest.mark.parametrize(("expression", "properties", "expected"), CASES)
def test_case(expression: str, properties: P, expected: bool) -> None:
    match = compile_sql(expression)
    assert match(properties) is expected


def test_cases_are_unique() -> None:
    keys = [(expression, tuple(sorted(props.items()))) for expression, props, _ in CASES]
    assert len(keys) == len(set(keys))


# (expression, words the message must contain, position)
ERRORS: list[tuple[str, str, int | None]] = [
    ("", "empty expression", 0),
    ("  \n\t", "empty expression", 0),
    ("a = 1 AND", "expected a value", 9),
    ("(a = 1", "'(' at position 0 is not closed", 6),
    ("((a = 1)", "'(' at position 0 is not closed", 8),
    ("(a = 1 AND (b = 2)", "'(' at position 0 is not closed", 18),
    ("a = 1)", "')' at position 5 closes nothing", 5),
    ("(a = 1))", "')' at position 7 closes nothing", 7),
    ("()", "expected a value", 1),
    ("a == 1", "expected a value", 3),
    ("a != 1", "unknown operator '!'", 2),
    ("a = 1 && b = 2", "unknown operator '&'", 6),
    ("a = 1 || b = 2", "unknown operator '|'", 6),
    ("a LIKE 'x'", "unknown operator 'LIKE'", 2),
    ("a = 1 b = 2", "unknown operator 'b'", 6),
    ("a = 1 'x'", "after a complete expression", 6),
    ("a = 0L", "unknown operator 'L'", 5),
    ("a = 007", "after a complete expression", 5),
    ("a # 1", "unexpected character '#'", 2),
    ("a.b = 1", "unexpected character '.'", 1),
    ('a = "x"', "unexpected character '\"'", 4),
    ("a = 'abc", "unterminated string literal starting at position 4", 4),
    ("a = 'it''s", "unterminated string", 4),
    ("a = 'x' AND b = '", "unterminated string", 16),
    ("a = 1 /* note", "unterminated comment", 6),
    ("a = NULL", "NULL at position 4 cannot be compared", 4),
    ("NULL <> a", "cannot be compared", 0),
    ("a > 'x'", "cannot be compared with '>'", 4),
    ("'x' < a", "cannot be compared with '<'", 0),
    ("a >= TRUE", "cannot be compared", 5),
    ("a <= NULL", "cannot be compared", 5),
    ("(a = 1) > 5", "a condition at position 3 cannot be compared", 3),
    ("TRUE = 1", "TRUE at position 0 cannot be compared with number 1", 0),
    ("FALSE <> 'x'", "cannot be compared", 0),
    ("a BETWEEN 10 AND 0", "low bound number 10 is above the high bound number 0", 2),
    (" a between 10 and 0", "BETWEEN", 3),  # RocketMQ ParserTest.testParse_illegalBetween
    ("a between 'a' and 'b'", "cannot be compared", 10),
    ("a between NULL and 5", "cannot be NULL", 2),
    ("a between 1 5", "expected AND", 12),
    ("a in (1, 2)", "expected a string literal in the IN list", 6),
    ("a in ()", "expected a string literal", 6),
    ("a in ('x' 'y')", "expected ',' or ')'", 10),
    ("a in 'x'", "expected '(' after IN", 5),
    ("'a' in ('a')", "IN at position 4 needs a property", 4),
    ("-a in ('a')", "needs a property", 3),
    ("value contains x", "expected a string literal after CONTAINS", 15),  # RocketMQ
    ("value not contains x", "expected a string literal after CONTAINS", 19),
    ("value contains 123", "expected a string literal", 15),
    ("'axb' contains ", "expected a string literal", 15),
    ("value startswith 1", "after STARTSWITH", 17),
    ("a and between 2 and 10", "expected a value", 6),  # RocketMQ ParserTest invalidExpression
    ("5", "number 5 at position 0 is not a condition", 0),
    ("'x'", "string 'x' at position 0 is not a condition", 0),
    ("-a", "negation at position 0 is not a condition", 0),
    ("a = 1 AND 5", "not a condition (operand of AND)", 10),
    ("'x' OR a = 1", "not a condition (operand of OR)", 0),
    ("NOT 5", "not a condition (operand of NOT)", 4),
    ("a > 100000000000000000000000", "out of the 64-bit range", 4),  # RocketMQ decimalOverFlow
    ("a > 9223372036854775808", "out of the 64-bit range", 4),
    ("a > 1e400", "larger than the largest double", 4),
    ("a > 0.0", "less than Double.MIN_VALUE", 4),
    ("a > 1e-400", "less than Double.MIN_VALUE", 4),
    ("a IS 5", "expected NULL or NOT NULL after IS", 5),
    ("a IS NOT 5", "expected NULL after IS NOT", 9),
    ("a NOT 5", "NOT at position 2 must be followed by", 2),
    ("a NOT = 5", "NOT at position 2", 2),
    ("a = -- note\n", "expected a value", 12),
]


@pytest.mark.parametrize(("expression", "words", "position"), ERRORS)
def test_error(expression: str, words: str, position: int | None) -> None:
    with pytest.raises(SqlFilterError) as caught:
        compile_sql(expression)
    assert words in str(caught.value)
    assert caught.value.position == position
    if position is not None and caught.value.position is not None:
        assert f"position {position}" in str(caught.value) or position == MAX_EXPRESSION_LENGTH


def test_error_is_a_value_error_with_the_token() -> None:
    with pytest.raises(ValueError, match="unknown operator 'LIKE'") as caught:
        compile_sql("TAGS LIKE 'a%'")
    assert isinstance(caught.value, SqlFilterError)
    assert caught.value.token == "LIKE"


def test_not_a_string() -> None:
    with pytest.raises(SqlFilterError, match="must be a string"):
        compile_sql(b"a = 1")  # type: ignore[arg-type]


def test_too_long() -> None:
    clause = "a = 'x' OR "
    expression = clause * (MAX_EXPRESSION_LENGTH // len(clause)) + "b = 'y'"
    assert len(expression) > MAX_EXPRESSION_LENGTH
    with pytest.raises(SqlFilterError, match=f"more than the {MAX_EXPRESSION_LENGTH} allowed"):
        compile_sql(expression)
    fits = clause * ((MAX_EXPRESSION_LENGTH - 7) // len(clause)) + "b = 'y'"
    assert len(fits) <= MAX_EXPRESSION_LENGTH
    assert compile_sql(fits)({"b": "y"}) is True


@pytest.mark.parametrize(
    "expression",
    [
        "(" * (MAX_DEPTH + 1) + "a = 1" + ")" * (MAX_DEPTH + 1),
        "NOT " * (MAX_DEPTH + 1) + "TRUE",
        "-" * (MAX_DEPTH + 1) + "a IS NULL",
        "+" * (MAX_DEPTH + 1) + "a IS NULL",
        "a = 1" + " = TRUE" * (MAX_DEPTH + 1),
        "a" + " CONTAINS 'x'" * (MAX_DEPTH + 1),
        "NOT (" * 40 + "- (" * 40 + "a" + ")" * 80,
    ],
)
def test_too_deep(expression: str) -> None:
    with pytest.raises(SqlFilterError, match=f"deeper than {MAX_DEPTH} levels at position"):
        compile_sql(expression)


def test_deep_but_allowed() -> None:
    depth = MAX_DEPTH - 2
    assert compile_sql("(" * depth + "a = 1" + ")" * depth)({"a": "1"}) is True
    # An even number of NOTs around a comparison, deep enough to need helper functions.
    nots = "NOT (" * 30 + "a = 'x'" + ")" * 30
    assert compile_sql(nots)({"a": "x"}) is True
    assert compile_sql(nots)({"a": "y"}) is False
    assert compile_sql(nots)({}) is False
    mixed = "(" * 20 + "NOT (" * 20 + "a IS NULL" + ")" * 40
    assert compile_sql(mixed)({}) is True
    assert compile_sql(mixed)({"a": "1"}) is False


def test_long_chains_are_not_deep() -> None:
    ors = " OR ".join(f"p{i} = '{i}'" for i in range(200))
    match = compile_sql(ors)
    assert match({"p199": "199"}) is True
    assert match({"p199": "198"}) is False
    ands = " AND ".join(f"p{i} IS NULL" for i in range(200))
    assert compile_sql(ands)({}) is True
    assert compile_sql(f"NOT ({ands})")({"p199": "x"}) is True


def test_literals_reach_the_code_as_constants() -> None:
    # Quotes, backslashes and Python syntax in literals are data, never code.
    nasty = "'); import os; os._exit(1) #\\n"
    match = compile_sql("a = '" + nasty.replace("'", "''") + "'")
    assert match({"a": nasty}) is True
    assert match({"a": "x"}) is False


def test_compiled_once_and_reused() -> None:
    assert compile_sql("a = 'reuse'") is compile_sql("a = 'reuse'")


def test_any_mapping() -> None:
    from types import MappingProxyType

    match = compile_sql("a > 5 AND b IN ('x','y') AND TAGS <> 'skip'")
    assert match(MappingProxyType({"a": "6", "b": "x", "TAGS": "t"})) is True
    assert match(MappingProxyType({"a": "6", "b": "x", "TAGS": "skip"})) is False
