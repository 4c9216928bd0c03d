"""RocketMQ's SQL92 property filter (``MessageSelector.bySql``, a v2 ``FilterExpression`` of type
SQL, wharf.v1), sans-IO: ``compile_sql(text)`` once per subscription, then call the result with a
message's properties (a ``str -> str`` mapping; the broker puts the tag under ``TAGS``, as
RocketMQ's ``MessageConst.PROPERTY_TAGS`` does) to learn whether the consumer gets the message.

Mirrors Apache RocketMQ's filter module (``filter/.../parser/SelectorParser.jj`` and the generated
``SelectorParser.java``, ``filter/.../expression/*.java``; the broker side is
``broker/.../filter/ExpressionMessageFilter.java``), read at apache/rocketmq 8fc57f1 (5.x):

Grammar, loosest first (all binary operators left-associative)::

    or       := and ( OR and )*
    and      := equality ( AND equality )*
    equality := comparison ( '=' comparison | '<>' comparison | IS NULL | IS NOT NULL )*
    comparison := unary ( ('>' | '>=' | '<' | '<=') unary
                        | [NOT] (CONTAINS | STARTSWITH | ENDSWITH) 'string'
                        | [NOT] BETWEEN unary AND unary
                        | [NOT] IN '(' 'string' ( ',' 'string' )* ')' )*
    unary    := '+' unary | '-' unary | NOT unary | primary
    primary  := 'string' | integer | decimal | TRUE | FALSE | NULL | identifier | '(' or ')'

Keywords are case-insensitive; identifiers are ``[A-Za-z_$][A-Za-z0-9_$]*`` (no dots) and name
properties case-sensitively. Strings are single-quoted with ``''`` for a quote. Integers are
``0`` or ``[1-9][0-9]*`` with an optional ``L``: Java ``Integer`` within 32 bits, ``Long``
beyond, out of 64 bits refused. Decimals are ``5.``, ``5.5``, ``.5``, ``5E10`` (Java ``Double``);
one that is infinite or rounds to 0.0 (so ``0.0`` itself) is refused, as RocketMQ does. ``--``
comments run to a newline, ``/* */`` comments do not nest.

Semantics where RocketMQ is subtle (its behaviour, kept on purpose):

* ``NOT`` is a unary operator binding tighter than comparisons: ``NOT a = 'x'`` is
  ``(NOT a) = 'x'``; write ``NOT (a = 'x')``. A bare property used as a condition (``a``,
  ``NOT a``, ``a AND b = 1``) is a boolean cast: NULL when missing, FALSE when present (values are
  strings, never booleans), so ``NOT a`` is TRUE whenever ``a`` is set.
* Three-valued logic: comparisons with a missing property are NULL; ``AND``/``OR``/``NOT`` follow
  SQL (FALSE AND NULL is FALSE, TRUE OR NULL is TRUE, NOT NULL is NULL); a message matches only
  when the whole expression is TRUE.
* ``=`` and ``<>`` are asymmetric in NULL: ``a = 'x'`` is NULL when ``a`` is missing, but
  ``'x' = a`` is FALSE (so ``'x' <> a`` is TRUE), and ``a = b`` is TRUE when both are missing.
  ``IS NULL`` is always TRUE or FALSE. ``a = NULL`` is refused.
* ``IN``/``NOT IN`` need a property on the left and string literals in the list; a missing
  property gives NULL. ``CONTAINS``, ``STARTSWITH``, ``ENDSWITH`` and their ``NOT`` forms give
  FALSE (never NULL) when the value is missing or not a string, and FALSE for an empty pattern,
  negated or not.
* Numbers: a property compared with an integer literal is parsed like Java ``Integer.valueOf``
  (``Long.valueOf`` for a literal beyond 32 bits): optional sign and digits only, no spaces, no
  decimals (``'5.0' = 5`` cannot be evaluated); compared with a decimal literal it is parsed like
  ``Double.valueOf`` (``'1e3'``, ``' 5 '``, ``'NaN'``, ``'0x1p3'``...). ``=`` works that way
  too: ``a = 5`` holds for ``'5'`` and ``'+5'``. Two properties compared with ``>``... are both
  parsed as doubles; with ``=`` they compare as strings. Double order is Java's ``compareTo``
  (NaN above everything, -0.0 below 0.0). ``a = TRUE`` holds when ``a`` equals ``'true'`` in any
  case. ``-a`` of a property is always NULL (the value is a string, not a number).
* When RocketMQ cannot evaluate a comparison (a non-numeric value compared with a number, a
  32-bit literal against ``'3000000000'``, two non-numeric properties with ``<``, ``TRUE = a``
  with ``a`` set) its expression throws and the broker does not deliver the message
  (``ExpressionMessageFilter`` logs and returns false): here too the whole expression is then
  false for that message, even under ``OR`` or ``NOT`` (evaluation is left to right and
  short-circuits, as in Java, so ``a = 'x' OR b > 5`` matches ``a = 'x'`` whatever ``b`` is).
* Refused at compile time like RocketMQ: ``>``... with a string, boolean or NULL literal or a
  condition on either side; ``BETWEEN`` with literal bounds in the wrong order or NULL;
  ``CONTAINS`` without a string literal; a top-level or ``AND``/``OR``/``NOT`` operand that is a
  literal number or string.

One deliberate difference: RocketMQ's grammar has no end-of-input rule, so it silently ignores
anything after a complete expression (``a = 1 b = 2`` subscribes to ``a = 1``, ``a = 1)`` is
accepted). Here trailing tokens are refused with SqlFilterError, except a ``--`` comment at the
very end without a newline (which RocketMQ also accepts).

Limits: expressions longer than MAX_EXPRESSION_LENGTH characters or nested deeper than MAX_DEPTH
(parentheses, NOT/sign chains, chained comparisons; an ``AND``/``OR`` chain is one level) are
refused, so a hostile subscription can neither exhaust the stack nor the CPU.

The parsed tree is turned into the source of one Python function (property names and literals
are bound as closure constants, never spliced into the source), compiled once; a match costs a
few dict lookups. ``a > 5 AND b IN ('x','y') AND TAGS <> 'skip'`` over 100k property dicts
(CPython 3.11, shared 2-core box): about 150 ns per message, where a lambda doing just the three
``m.get(...) is not None`` costs about 105 ns. Measured (as one command line) with::

    .venv/bin/python -m timeit -s "from wharf.store.read.sql_filter import compile_sql;
      import random; r = random.Random(7);
      f = compile_sql(\\"a > 5 AND b IN ('x','y') AND TAGS <> 'skip'\\");
      ms = [{'a': str(r.randint(0, 10)), 'b': r.choice('xyz'),
             'TAGS': r.choice(['skip', 't1', 't2']), 'KEYS': 'k'} for _ in range(100_000)]"
      "for m in ms: f(m)"
    20 loops, best of 5: 15.2 msec per loop
"""

from __future__ import annotations

import functools
import math
import re
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

__all__ = ["MAX_DEPTH", "MAX_EXPRESSION_LENGTH", "SqlFilterError", "compile_sql"]

MAX_EXPRESSION_LENGTH: Final = 4096
MAX_DEPTH: Final = 64

_INT32_MIN: Final = -(2**31)
_INT32_MAX: Final = 2**31 - 1
_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1
_DOUBLE_MIN_VALUE: Final = 5e-324  # Java's Double.MIN_VALUE, the smallest positive double

# Generated code nests a few parentheses per tree level; past this many levels a subtree becomes
# a helper function of its own so that CPython's parser limits are never near.
_HOIST_EVERY: Final = 12


class SqlFilterError(ValueError):
    """A SQL filter expression that cannot be compiled; ``position`` is a 0-based offset into
    the expression (None when the whole expression is at fault) and ``token`` the text there."""

    def __init__(self, message: str, position: int | None = None, token: str | None = None):
        super().__init__(message)
        self.position = position
        self.token = token


# ---------------------------------------------------------------------------------------------
# Java values: str is String, bool is Boolean, int is Integer, _JLong is Long, float is Double.


class _JLong(int):
    """A Java ``Long`` (a literal beyond 32 bits): a property compared with it parses as 64-bit."""

    __slots__ = ()


JValue = str | bool | int | float | None


class _EvalError(Exception):
    """RocketMQ's expression throws for this message; the broker then does not deliver it."""


_EVAL_ERROR: Final = _EvalError()
_SIGNS: Final = ("+", "-")


def _long_digits(body: str) -> str:
    """Leading zeros (any script) removed from a run of decimal digits, so int() never sees a
    string longer than its 4300-digit limit only because of them."""
    for index, char in enumerate(body):
        if unicodedata.decimal(char) != 0:
            return body[index:]
    return "0"


def _parse_java_integer(text: str, low: int, high: int) -> int:
    """Java's ``Integer.valueOf``/``Long.valueOf``: an optional sign and decimal digits (any
    script's, one UTF-16 unit each), nothing else; out of range throws."""
    if text.isdigit() and len(text) < 10 and text.isascii():
        return int(text)
    body = text[1:] if text[:1] in _SIGNS else text
    if not body.isdecimal():
        raise _EVAL_ERROR
    if not text.isascii():
        if any(ord(char) > 0xFFFF for char in body):
            raise _EVAL_ERROR
        body = "".join(str(unicodedata.decimal(char)) for char in body)
    if len(body) > 19:
        body = _long_digits(body)
        if len(body) > 19:
            raise _EVAL_ERROR
    value = -int(body) if text[:1] == "-" else int(body)
    if low <= value <= high:
        return value
    raise _EVAL_ERROR


# Property values already converted by _to_int (so valid for _to_long too): generated code looks
# them up before calling, int() costing several dict lookups. Bounded, filled as values come.
_INT_MEMO: Final[dict[str, int]] = {}
_INT_MEMO_SIZE: Final = 1 << 16


def _to_int(text: str) -> int:
    value = _parse_java_integer(text, _INT32_MIN, _INT32_MAX)
    if len(text) <= 12 and len(_INT_MEMO) < _INT_MEMO_SIZE:
        _INT_MEMO[text] = value
    return value


def _to_long(text: str) -> int:
    value = _INT_MEMO.get(text)
    if value is not None:
        return value
    return _parse_java_integer(text, _INT64_MIN, _INT64_MAX)


_JAVA_DOUBLE: Final = re.compile(
    r"[+-]?(?:NaN|Infinity"
    r"|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[fFdD]?"
    r"|0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)[pP][+-]?[0-9]+[fFdD]?)",
    re.ASCII,
)
_JAVA_TRIM: Final = "".join(chr(code) for code in range(0x21))  # String.trim(): chars <= ' '


def _to_double(text: str) -> float:
    """Java's ``Double.valueOf``: trimmed, then a Java floating-point literal (``1.5``, ``1e3``,
    ``2f``, ``NaN``, ``-Infinity``, ``0x1.8p1``); anything else throws."""
    if text.isdigit() and text.isascii():
        return float(text)
    text = text.strip(_JAVA_TRIM)
    if _JAVA_DOUBLE.fullmatch(text) is None:
        raise _EVAL_ERROR
    if text[-1] in "fFdD":
        text = text[:-1]
    if text.endswith("NaN"):
        return math.nan
    if text.endswith("Infinity"):
        return -math.inf if text[0] == "-" else math.inf
    if "x" in text or "X" in text:
        try:
            return float.fromhex(text)
        except OverflowError:
            return -math.inf if text[0] == "-" else math.inf
    return float(text)


def _dcmp(left: float, right: float) -> int:
    """Java's ``Double.compareTo``: NaN equals NaN and is above everything, -0.0 < 0.0."""
    if left < right:
        return -1
    if left > right:
        return 1
    left_nan = left != left
    right_nan = right != right
    if left_nan or right_nan:
        return 0 if left_nan and right_nan else (1 if left_nan else -1)
    if left == 0.0:
        left_sign = math.copysign(1.0, left)
        right_sign = math.copysign(1.0, right)
        return 0 if left_sign == right_sign else (-1 if left_sign < right_sign else 1)
    return 0


def _java_class(value: object) -> str:
    kind = type(value)
    if kind is str:
        return "S"
    if kind is bool:
        return "B"
    if kind is _JLong:
        return "L"
    if kind is int:
        return "I"
    return "D"


def _icmp(left: int, right: int) -> int:
    return (left > right) - (left < right)


def _jcmp(left: JValue, right: JValue) -> int:
    """``ComparisonExpression.__compare`` with string conversion on (both non-null)."""
    lc = _java_class(left)
    rc = _java_class(right)
    if lc == rc:
        if lc == "D":
            return _dcmp(left, right)  # type: ignore[arg-type]
        return (left > right) - (left < right)  # type: ignore[operator]
    if lc == "B":
        if rc == "S":  # RocketMQ casts the Boolean to String: ClassCastException
            raise _EVAL_ERROR
        return -1
    if lc in "IL":
        assert isinstance(left, int)
        if rc in "IL":
            return _icmp(left, right)  # type: ignore[arg-type]
        if rc == "D":
            return _dcmp(float(left), right)  # type: ignore[arg-type]
        if rc == "S":
            assert isinstance(right, str)
            return _icmp(left, _to_int(right) if lc == "I" else _to_long(right))
        return -1
    if lc == "D":
        assert isinstance(left, float)
        if rc in "IL":
            return _dcmp(left, float(right))  # type: ignore[arg-type]
        if rc == "S":
            assert isinstance(right, str)
            return _dcmp(left, _to_double(right))
        return -1
    assert isinstance(left, str)
    if rc == "B":
        return _icmp(left.lower() == "true", right)  # type: ignore[arg-type]
    if rc == "I":
        return _icmp(_to_int(left), right)  # type: ignore[arg-type]
    if rc == "L":
        return _icmp(_to_long(left), right)  # type: ignore[arg-type]
    return _dcmp(_to_double(left), right)  # type: ignore[arg-type]


def _eq(left: JValue, right: JValue) -> bool | None:
    """``=`` (``doCreateEqual``): NULL only when the left side alone is null."""
    if left is None:
        return True if right is None else None
    if right is None:
        return False
    return _jcmp(left, right) == 0


def _ord(left: JValue, right: JValue) -> int | None:
    """``>``, ``>=``, ``<``, ``<=`` (``ComparisonExpression.evaluate``) on a non-null left."""
    if right is None:
        return None
    if type(left) is str and type(right) is str:
        return _dcmp(_to_double(left), _to_double(right))
    return _jcmp(left, right)


def _neg(value: JValue) -> JValue:
    """Unary minus (``UnaryExpression.createNegate``): numbers only, anything else is null."""
    kind = type(value)
    if kind is _JLong:
        return _JLong(-value)  # type: ignore[operator]
    if kind is int or kind is float:
        return -value  # type: ignore[operator]
    return None


def _evaluated_false(value: JValue) -> bool:
    return False


_RUNTIME: Final[dict[str, object]] = {
    "_EvalError": _EvalError,
    "_to_int": _to_int,
    "_INT_MEMO": _INT_MEMO,
    "_to_long": _to_long,
    "_to_double": _to_double,
    "_dcmp": _dcmp,
    "_eq": _eq,
    "_ord": _ord,
    "_neg": _neg,
    "_evaluated_false": _evaluated_false,
}

# ---------------------------------------------------------------------------------------------
# Tokens


_KEYWORDS: Final = frozenset(
    {
        "NOT",
        "AND",
        "OR",
        "BETWEEN",
        "IN",
        "TRUE",
        "FALSE",
        "NULL",
        "IS",
        "CONTAINS",
        "STARTSWITH",
        "ENDSWITH",
    }
)
_WHITESPACE: Final = " \t\n\r\f"
_NEWLINE: Final = re.compile(r"\r\n|\n|\r")
_ID_RE: Final = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
_DECIMAL_RE: Final = re.compile(r"0|[1-9][0-9]*[lL]?")
_FLOAT_RES: Final = (
    re.compile(r"[0-9]+\.[0-9]*(?:[eE][+-]?[0-9]+)?"),
    re.compile(r"\.[0-9]+(?:[eE][+-]?[0-9]+)?"),
    re.compile(r"[0-9]+[eE][+-]?[0-9]+"),
)
_PUNCTUATION: Final = ("<>", "<=", ">=", "=", "<", ">", "(", ")", ",", "+", "-")


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str  # a keyword, a punctuation mark, "ID", "STRING", "INTEGER", "DECIMAL" or "EOF"
    text: str
    position: int
    value: str | int | float | None = None

    def describe(self) -> str:
        if self.kind == "EOF":
            return "end of expression"
        return repr(self.text)


class _Lexer:
    """RocketMQ's token manager, lazily: tokens are read as the parser asks for them."""

    def __init__(self, source: str):
        self.source = source
        self.offset = 0

    def _skip(self) -> None:
        source = self.source
        while self.offset < len(source):
            char = source[self.offset]
            if char in _WHITESPACE:
                self.offset += 1
            elif source.startswith("--", self.offset):
                # A line comment needs its newline (JavaCC's LINE_COMMENT); without one the
                # dashes are two minus signs, as in RocketMQ.
                newline = _NEWLINE.search(source, self.offset)
                if newline is None:
                    return
                self.offset = newline.end()
            elif source.startswith("/*", self.offset):
                end = source.find("*/", self.offset + 2)
                if end < 0:
                    raise SqlFilterError(
                        f"unterminated comment: '/*' at position {self.offset} is never closed",
                        self.offset,
                        "/*",
                    )
                self.offset = end + 2
            else:
                return

    def next(self) -> _Token:
        self._skip()
        source = self.source
        start = self.offset
        if start >= len(source):
            return _Token("EOF", "", start)
        char = source[start]
        if char == "'":
            return self._string(start)
        if char.isascii() and (char.isdigit() or char == "."):
            best: re.Match[str] | None = None
            for pattern in _FLOAT_RES:
                match = pattern.match(source, start)
                if match is not None and (best is None or match.end() > best.end()):
                    best = match
            decimal = _DECIMAL_RE.match(source, start)
            if decimal is not None and (best is None or decimal.end() > best.end()):
                self.offset = decimal.end()
                return self._integer(decimal.group(), start)
            if best is not None:
                self.offset = best.end()
                return self._decimal(best.group(), start)
        identifier = _ID_RE.match(source, start)
        if identifier is not None:
            text = identifier.group()
            self.offset = identifier.end()
            upper = text.upper()
            if upper in _KEYWORDS:
                return _Token(upper, text, start)
            return _Token("ID", text, start, text)
        for mark in _PUNCTUATION:
            if source.startswith(mark, start):
                self.offset = start + len(mark)
                return _Token(mark, mark, start)
        if char in "!&|":
            hint = {"!": "use '<>' or NOT", "&": "use AND", "|": "use OR"}[char]
            raise SqlFilterError(
                f"unknown operator {char!r} at position {start} ({hint})", start, char
            )
        raise SqlFilterError(f"unexpected character {char!r} at position {start}", start, char)

    def _string(self, start: int) -> _Token:
        source = self.source
        index = start + 1
        parts: list[str] = []
        while True:
            end = source.find("'", index)
            if end < 0:
                raise SqlFilterError(
                    f"unterminated string literal starting at position {start}", start, "'"
                )
            parts.append(source[index:end])
            if source.startswith("''", end):
                parts.append("'")
                index = end + 2
                continue
            self.offset = end + 1
            return _Token("STRING", source[start : end + 1], start, "".join(parts))

    def _integer(self, text: str, start: int) -> _Token:
        digits = text.rstrip("lL")
        if len(digits) > 19 or int(digits) > _INT64_MAX:
            raise SqlFilterError(
                f"integer literal {text} at position {start} is out of the 64-bit range",
                start,
                text,
            )
        number = int(digits)
        value: int = number if number <= _INT32_MAX else _JLong(number)
        return _Token("INTEGER", text, start, value)

    def _decimal(self, text: str, start: int) -> _Token:
        number = float(text)
        if math.isinf(number):
            raise SqlFilterError(
                f"decimal literal at position {start} is larger than the largest double",
                start,
                text,
            )
        if number < _DOUBLE_MIN_VALUE:
            raise SqlFilterError(
                f"decimal literal {text} at position {start} is less than Double.MIN_VALUE "
                "(RocketMQ refuses 0.0; write the integer 0)",
                start,
                text,
            )
        return _Token("DECIMAL", text, start, number)


# ---------------------------------------------------------------------------------------------
# The tree. "Boolean" nodes are RocketMQ's BooleanExpression classes.


@dataclass(frozen=True, slots=True, eq=False)
class _Node:
    position: int
    depth: int


@dataclass(frozen=True, slots=True, eq=False)
class _Prop(_Node):
    name: str


@dataclass(frozen=True, slots=True, eq=False)
class _Const(_Node):  # a ConstantExpression: string, Integer, Long or Double
    value: str | int | float


@dataclass(frozen=True, slots=True, eq=False)
class _BoolConst(_Node):  # TRUE, FALSE, NULL: both constant and boolean
    value: bool | None


@dataclass(frozen=True, slots=True, eq=False)
class _Neg(_Node):
    operand: _Node


@dataclass(frozen=True, slots=True, eq=False)
class _Compare(_Node):
    op: str  # = <> < <= > >=
    left: _Node
    right: _Node


@dataclass(frozen=True, slots=True, eq=False)
class _IsNull(_Node):
    operand: _Node
    negated: bool


@dataclass(frozen=True, slots=True, eq=False)
class _In(_Node):
    prop: _Prop
    values: frozenset[str]
    negated: bool


@dataclass(frozen=True, slots=True, eq=False)
class _Match(_Node):
    kind: str  # contains, startswith, endswith
    operand: _Node
    pattern: str
    negated: bool


@dataclass(frozen=True, slots=True, eq=False)
class _Not(_Node):
    operand: _Node


@dataclass(frozen=True, slots=True, eq=False)
class _Cast(_Node):  # a property used as a condition
    prop: _Prop


@dataclass(frozen=True, slots=True, eq=False)
class _Logic(_Node):
    op: str  # AND, OR
    operands: tuple[_Node, ...]


_BOOLEAN_NODES: Final = (_BoolConst, _Compare, _IsNull, _In, _Match, _Not, _Cast, _Logic)


def _is_boolean(node: _Node) -> bool:
    return isinstance(node, _BOOLEAN_NODES)


def _describe(node: _Node) -> str:
    if isinstance(node, _Prop):
        return f"property {node.name}"
    if isinstance(node, _BoolConst):
        return {True: "TRUE", False: "FALSE", None: "NULL"}[node.value]
    if isinstance(node, _Const):
        if isinstance(node.value, str):
            return "string " + "'" + node.value.replace("'", "''") + "'"
        return f"number {node.value}"
    if isinstance(node, _Neg):
        return "a negation"
    return "a condition"


_COMPARISON_OPS: Final = frozenset({">", ">=", "<", "<="})
_MATCH_KEYWORDS: Final = frozenset({"CONTAINS", "STARTSWITH", "ENDSWITH"})
_AFTER_NOT: Final = _MATCH_KEYWORDS | {"BETWEEN", "IN"}


class _Parser:
    def __init__(self, source: str):
        self.lexer = _Lexer(source)
        self.lookahead: list[_Token] = []
        self.nesting = 0

    # -- tokens --

    def peek(self, ahead: int = 0) -> _Token:
        while len(self.lookahead) <= ahead:
            self.lookahead.append(self.lexer.next())
        return self.lookahead[ahead]

    def take(self) -> _Token:
        token = self.peek()
        self.lookahead.pop(0)
        return token

    def expect(self, kind: str, what: str) -> _Token:
        token = self.peek()
        if token.kind != kind:
            raise self.unexpected(token, what)
        return self.take()

    @staticmethod
    def unexpected(token: _Token, expected: str) -> SqlFilterError:
        return SqlFilterError(
            f"expected {expected} at position {token.position}, found {token.describe()}",
            token.position,
            token.text,
        )

    @staticmethod
    def deeper(position: int, *children: _Node) -> int:
        depth = 1 + max((child.depth for child in children), default=0)
        if depth > MAX_DEPTH:
            raise SqlFilterError(
                f"expression nests deeper than {MAX_DEPTH} levels at position {position}",
                position,
            )
        return depth

    @staticmethod
    def as_boolean(node: _Node, where: str) -> _Node:
        """``asBooleanExpression``: conditions pass, a property is cast, anything else fails."""
        if _is_boolean(node):
            return node
        if isinstance(node, _Prop):
            return _Cast(node.position, node.depth + 1, node)
        raise SqlFilterError(
            f"{_describe(node)} at position {node.position} is not a condition ({where})",
            node.position,
        )

    # -- grammar --

    def parse(self) -> _Node:
        node = self.parse_or()
        token = self.peek()
        if token.kind != "EOF" and not (
            token.kind == "-" and self.lexer.source.startswith("--", token.position)
        ):
            if token.kind == ")":
                raise SqlFilterError(
                    f"unbalanced parentheses: ')' at position {token.position} closes nothing",
                    token.position,
                    ")",
                )
            if token.kind == "ID":
                raise SqlFilterError(
                    f"unknown operator {token.text!r} at position {token.position} "
                    "(or a missing AND/OR before it)",
                    token.position,
                    token.text,
                )
            raise SqlFilterError(
                f"unexpected {token.describe()} at position {token.position} after a complete "
                "expression (missing AND/OR?)",
                token.position,
                token.text,
            )
        return self.as_boolean(node, "the whole expression must be a condition")

    def parse_logic(self, op: str, parse_operand: Callable[[], _Node]) -> _Node:
        first = parse_operand()
        if self.peek().kind != op:
            return first
        position = self.peek().position
        operands = [self.as_boolean(first, f"operand of {op}")]
        while self.peek().kind == op:
            self.take()
            operands.append(self.as_boolean(parse_operand(), f"operand of {op}"))
        # ((x AND y) AND z) evaluates exactly like the flat x AND y AND z: left to right,
        # stopping at the first FALSE (TRUE for OR).
        flat: list[_Node] = []
        for operand in operands:
            if isinstance(operand, _Logic) and operand.op == op and operand is operands[0]:
                flat.extend(operand.operands)
            else:
                flat.append(operand)
        return _Logic(position, self.deeper(position, *flat), op, tuple(flat))

    def parse_or(self) -> _Node:
        return self.parse_logic("OR", self.parse_and)

    def parse_and(self) -> _Node:
        return self.parse_logic("AND", self.parse_equality)

    def parse_equality(self) -> _Node:
        left = self.parse_comparison()
        while True:
            token = self.peek()
            if token.kind in ("=", "<>"):
                self.take()
                right = self.parse_comparison()
                self.check_equal_operands(left, right, token)
                left = _Compare(
                    token.position,
                    self.deeper(token.position, left, right),
                    token.kind,
                    left,
                    right,
                )
            elif token.kind == "IS":
                self.take()
                negated = False
                if self.peek().kind == "NOT":
                    self.take()
                    negated = True
                    self.expect("NULL", "NULL after IS NOT")
                else:
                    self.expect("NULL", "NULL or NOT NULL after IS")
                left = _IsNull(token.position, self.deeper(token.position, left), left, negated)
            else:
                return left

    def parse_comparison(self) -> _Node:
        left = self.parse_unary()
        while True:
            token = self.peek()
            kind = token.kind
            negated = False
            if kind == "NOT":
                following = self.peek(1)
                if following.kind not in _AFTER_NOT:
                    raise SqlFilterError(
                        f"NOT at position {token.position} must be followed by CONTAINS, "
                        f"STARTSWITH, ENDSWITH, BETWEEN or IN here, found {following.describe()} "
                        f"(to negate a condition write NOT (...))",
                        token.position,
                        token.text,
                    )
                self.take()
                negated = True
                kind = following.kind
            if kind in _COMPARISON_OPS:
                self.take()
                right = self.parse_unary()
                self.check_ordered_operand(left, token)
                self.check_ordered_operand(right, token)
                left = _Compare(
                    token.position, self.deeper(token.position, left, right), kind, left, right
                )
            elif kind in _MATCH_KEYWORDS:
                self.take()
                pattern = self.expect("STRING", f"a string literal after {kind}")
                assert isinstance(pattern.value, str)
                left = _Match(
                    token.position,
                    self.deeper(token.position, left),
                    kind.lower(),
                    left,
                    pattern.value,
                    negated,
                )
            elif kind == "BETWEEN":
                self.take()
                low = self.parse_unary()
                self.expect("AND", "AND between the bounds of BETWEEN")
                high = self.parse_unary()
                left = self.between(token, left, low, high, negated)
            elif kind == "IN":
                self.take()
                self.expect("(", "'(' after IN")
                values = [self.expect("STRING", "a string literal in the IN list").value]
                while self.peek().kind == ",":
                    self.take()
                    values.append(self.expect("STRING", "a string literal in the IN list").value)
                self.expect(")", "',' or ')' in the IN list")
                if not isinstance(left, _Prop):
                    raise SqlFilterError(
                        f"IN at position {token.position} needs a property on its left, "
                        f"not {_describe(left)}",
                        token.position,
                        token.text,
                    )
                left = _In(
                    token.position,
                    self.deeper(token.position, left),
                    left,
                    frozenset(str(value) for value in values),
                    negated,
                )
            else:
                return left

    def parse_unary(self) -> _Node:
        token = self.peek()
        if token.kind in ("+", "-", "NOT"):
            self.take()
            self.nesting += 1
            if self.nesting > MAX_DEPTH:
                raise SqlFilterError(
                    f"expression nests deeper than {MAX_DEPTH} levels at position {token.position}",
                    token.position,
                    token.text,
                )
            operand = self.parse_unary()
            self.nesting -= 1
            if token.kind == "+":
                return operand  # RocketMQ returns the operand itself
            if token.kind == "-":
                return _Neg(token.position, self.deeper(token.position, operand), operand)
            operand = self.as_boolean(operand, "operand of NOT")
            return _Not(token.position, self.deeper(token.position, operand), operand)
        return self.parse_primary()

    def parse_primary(self) -> _Node:
        token = self.peek()
        kind = token.kind
        position = token.position
        if kind == "STRING" or kind == "INTEGER" or kind == "DECIMAL":
            self.take()
            assert token.value is not None
            return _Const(position, 1, token.value)
        if kind in ("TRUE", "FALSE", "NULL"):
            self.take()
            return _BoolConst(position, 1, {"TRUE": True, "FALSE": False, "NULL": None}[kind])
        if kind == "ID":
            self.take()
            return _Prop(position, 1, token.text)
        if kind == "(":
            self.take()
            self.nesting += 1
            if self.nesting > MAX_DEPTH:
                raise SqlFilterError(
                    f"expression nests deeper than {MAX_DEPTH} levels at position {position}",
                    position,
                    "(",
                )
            inner = self.parse_or()
            self.nesting -= 1
            closing = self.peek()
            if closing.kind != ")":
                raise SqlFilterError(
                    f"unbalanced parentheses: '(' at position {position} is not closed "
                    f"(found {closing.describe()} at position {closing.position})",
                    closing.position,
                    closing.text,
                )
            self.take()
            return inner  # RocketMQ returns the inner expression itself
        raise self.unexpected(token, "a value, a property or '('")

    # -- RocketMQ's parse-time checks --

    @staticmethod
    def check_ordered_operand(node: _Node, operator: _Token) -> None:
        """``checkLessThanOperand``: only numbers, properties and negations compare in order."""
        if (isinstance(node, _Const) and not isinstance(node.value, str)) or not (
            isinstance(node, _Const | _BoolConst) or _is_boolean(node)
        ):
            return
        raise SqlFilterError(
            f"{_describe(node)} at position {node.position} cannot be compared with "
            f"{operator.text!r} (only numbers, as RocketMQ)",
            node.position,
            operator.text,
        )

    @staticmethod
    def check_equal_operands(left: _Node, right: _Node, operator: _Token) -> None:
        for node in (left, right):
            if isinstance(node, _BoolConst) and node.value is None:
                raise SqlFilterError(
                    f"NULL at position {node.position} cannot be compared with "
                    f"{operator.text!r}; use IS NULL / IS NOT NULL",
                    node.position,
                    "NULL",
                )
        if (
            isinstance(left, _BoolConst)
            and isinstance(right, _Const)
            and not isinstance(right, _BoolConst)
        ):
            raise SqlFilterError(
                f"{_describe(left)} at position {left.position} cannot be compared with "
                f"{_describe(right)} by {operator.text!r}",
                left.position,
                operator.text,
            )

    def between(self, token: _Token, value: _Node, low: _Node, high: _Node, negated: bool) -> _Node:
        position = token.position
        if (
            not negated
            and isinstance(low, _Const | _BoolConst)
            and isinstance(high, _Const | _BoolConst)
        ):
            if low.value is None or high.value is None:
                raise SqlFilterError(
                    f"BETWEEN at position {position}: the bounds cannot be NULL",
                    position,
                    "BETWEEN",
                )
            try:
                in_order = _jcmp(high.value, low.value) >= 0
            except _EvalError:
                in_order = False
            if not in_order:
                raise SqlFilterError(
                    f"BETWEEN at position {position}: the low bound {_describe(low)} is above "
                    f"the high bound {_describe(high)}",
                    position,
                    "BETWEEN",
                )
        for node in (value, low, high):
            self.check_ordered_operand(node, token)
        first_op, second_op, logic = ("<", ">", "OR") if negated else (">=", "<=", "AND")
        first = _Compare(position, self.deeper(position, value, low), first_op, value, low)
        second = _Compare(position, self.deeper(position, value, high), second_op, value, high)
        return _Logic(position, self.deeper(position, first, second), logic, (first, second))


# ---------------------------------------------------------------------------------------------
# Code generation. bool_code(node) is an expression worth True/False/None (RocketMQ's Boolean or
# null); match_code(node) is an expression that is True exactly when bool_code would be True
# (short-circuiting where that changes nothing but speed). Both may raise _EvalError.

_NOT_STATIC: Final = object()
_PY_OPS: Final = {"=": "==", "<>": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}


def _static_value(node: _Node) -> object:
    """The value of a node known without a message, else _NOT_STATIC."""
    if isinstance(node, _Const | _BoolConst):
        return node.value
    if isinstance(node, _Prop):
        return _NOT_STATIC
    if isinstance(node, _Neg):
        operand = node.operand
        if isinstance(operand, _Prop):
            return None  # a property value is a string: its negation is null
        inner = _static_value(operand)
        if inner is _NOT_STATIC:
            return _NOT_STATIC
        return _neg(inner)  # type: ignore[arg-type]
    return _NOT_STATIC


class _Codegen:
    def __init__(self) -> None:
        self.constants: list[object] = []
        self.constant_names: dict[tuple[type, object], str] = {}
        self.helpers: list[str] = []
        self.temps = 0

    def constant(self, value: object) -> str:
        if value is None or value is True or value is False:
            return repr(value)
        key = (type(value), repr(value) if isinstance(value, float) else value)
        try:
            name = self.constant_names.get(key)
        except TypeError:
            name = None
        if name is None:
            name = f"_k{len(self.constants)}"
            self.constants.append(value)
            if not (isinstance(value, float) and value != value):
                self.constant_names[key] = name
        return name

    def temp(self) -> str:
        self.temps += 1
        return f"_t{self.temps}"

    def hoist(self, code: str) -> str:
        name = f"_h{len(self.helpers)}"
        self.helpers.append(f"    def {name}(m):\n        return {code}\n")
        return f"{name}(m)"

    def prop(self, node: _Prop) -> str:
        return f"m.get({self.constant(node.name)})"

    # -- values --

    def value_code(self, node: _Node, level: int) -> str:
        if level >= _HOIST_EVERY:
            return self.hoist(self.value_code(node, 0))
        static = _static_value(node)
        if static is not _NOT_STATIC:
            return self.constant(static)
        if isinstance(node, _Prop):
            return self.prop(node)
        if isinstance(node, _Neg):
            return f"_neg({self.value_code(node.operand, level + 1)})"
        return self.bool_code(node, level)

    # -- conditions --

    def bool_code(self, node: _Node, level: int) -> str:
        if level >= _HOIST_EVERY:
            return self.hoist(self.bool_code(node, 0))
        if isinstance(node, _BoolConst):
            return repr(node.value)
        if isinstance(node, _Logic):
            temps = [self.temp() for _ in node.operands]
            if node.op == "AND":
                chain = " and ".join(
                    f"({t} := {self.bool_code(op, level + 1)}) is not False"
                    for t, op in zip(temps, node.operands, strict=True)
                )
                nulls = " or ".join(f"{t} is None" for t in temps)
                return f"((None if ({nulls}) else True) if ({chain}) else False)"
            chain = " or ".join(
                f"({t} := {self.bool_code(op, level + 1)}) is True"
                for t, op in zip(temps, node.operands, strict=True)
            )
            nulls = " or ".join(f"{t} is None" for t in temps)
            return f"(True if ({chain}) else (None if ({nulls}) else False))"
        if isinstance(node, _Not):
            t = self.temp()
            operand = self.bool_code(node.operand, level + 1)
            return f"(None if ({t} := {operand}) is None else {t} is False)"
        if isinstance(node, _Cast):
            return f"(None if {self.prop(node.prop)} is None else False)"
        if isinstance(node, _IsNull):
            return self.is_null_code(node, level)
        if isinstance(node, _In):
            t = self.temp()
            test = "not in" if node.negated else "in"
            return (
                f"(None if ({t} := {self.prop(node.prop)}) is None "
                f"else {t} {test} {self.constant(node.values)})"
            )
        if isinstance(node, _Match):
            return self.match_op_code(node, level)
        assert isinstance(node, _Compare)
        fast = self.fast_compare(node)
        if fast is not None:
            t, getter, null_result, core, _ = fast
            return f"({null_result!r} if ({t} := {getter}) is None else {core})"
        left = self.value_code(node.left, level + 1)
        right = self.value_code(node.right, level + 1)
        if node.op in ("=", "<>"):
            if node.op == "=":
                return f"_eq({left}, {right})"
            t = self.temp()
            return f"(None if ({t} := _eq({left}, {right})) is None else {t} is False)"
        lt = self.temp()
        ct = self.temp()
        return (
            f"(None if ({lt} := {left}) is None else "
            f"(None if ({ct} := _ord({lt}, {right})) is None else {ct} {node.op} 0))"
        )

    def match_code(self, node: _Node, level: int) -> str:
        if level >= _HOIST_EVERY:
            return self.hoist(self.match_code(node, 0))
        if isinstance(node, _BoolConst):
            return repr(node.value is True)
        if isinstance(node, _Logic):
            joiner = " and " if node.op == "AND" else " or "
            return "(" + joiner.join(self.match_code(op, level + 1) for op in node.operands) + ")"
        if isinstance(node, _Not):
            return f"({self.bool_code(node.operand, level + 1)} is False)"
        if isinstance(node, _Cast):
            return "False"
        if isinstance(node, _IsNull):
            return self.is_null_code(node, level)
        if isinstance(node, _In):
            if not node.negated:
                return f"({self.prop(node.prop)} in {self.constant(node.values)})"
            t = self.temp()
            return (
                f"(({t} := {self.prop(node.prop)}) is not None "
                f"and {t} not in {self.constant(node.values)})"
            )
        if isinstance(node, _Match):
            return self.match_op_code(node, level)
        if isinstance(node, _Compare):
            fast = self.fast_compare(node)
            if fast is not None:
                t, getter, null_result, _, core = fast
                if null_result is True:
                    return f"(({t} := {getter}) is None or {core})"
                return f"(({t} := {getter}) is not None and {core})"
        return f"({self.bool_code(node, level)} is True)"

    def is_null_code(self, node: _IsNull, level: int) -> str:
        test = "is not None" if node.negated else "is None"
        static = _static_value(node.operand)
        if static is not _NOT_STATIC:
            return repr((static is not None) if node.negated else (static is None))
        return f"({self.value_code(node.operand, level + 1)} {test})"

    def match_op_code(self, node: _Match, level: int) -> str:
        """CONTAINS & co: FALSE for an empty pattern (without evaluating the operand), a null or
        a non-string value."""
        operand = node.operand
        static = _static_value(operand)
        if not node.pattern or (static is not _NOT_STATIC and type(static) is not str):
            return "False"
        pattern = self.constant(node.pattern)
        if static is not _NOT_STATIC:
            assert isinstance(static, str)
            found = {
                "contains": node.pattern in static,
                "startswith": static.startswith(node.pattern),
                "endswith": static.endswith(node.pattern),
            }[node.kind]
            return repr(found != node.negated)
        if not isinstance(operand, _Prop):
            return f"_evaluated_false({self.value_code(operand, level + 1)})"
        t = self.temp()
        if node.kind == "contains":
            core = f"{pattern} {'not in' if node.negated else 'in'} {t}"
        else:
            core = f"{'not ' if node.negated else ''}{t}.{node.kind}({pattern})"
        return f"(({t} := {self.prop(operand)}) is not None and {core})"

    def fast_compare(self, node: _Compare) -> tuple[str, str, bool | None, str, str] | None:
        """A property against a string or number literal, or two properties in order: returns
        (temp, property getter, result when the property is missing, test on the temp giving
        True/False/None, the same test giving True/False only)."""
        left, right, op = node.left, node.right, node.op
        py_op = _PY_OPS[op]
        if isinstance(left, _Prop) and isinstance(right, _Prop):
            if op in ("=", "<>"):
                return None
            t = self.temp()
            u = self.temp()
            test = f"_dcmp(_to_double({t}), _to_double({u})) {py_op} 0"
            core = f"(None if ({u} := {self.prop(right)}) is None else {test})"
            core_match = f"(({u} := {self.prop(right)}) is not None and {test})"
            return t, self.prop(left), None, core, core_match
        if isinstance(left, _Prop):
            prop, literal, prop_left = left, _static_value(right), True
        elif isinstance(right, _Prop):
            prop, literal, prop_left = right, _static_value(left), False
        else:
            return None
        kind = type(literal)
        if kind not in (str, int, _JLong, float):
            return None
        t = self.temp()
        k = self.constant(literal)
        if kind is str:
            converted = t
        elif kind is float:
            converted = f"_to_double({t})"
        elif kind is int:
            v = self.temp()
            converted = f"({v} if ({v} := _INT_MEMO.get({t})) is not None else _to_int({t}))"
        else:
            converted = f"_to_long({t})"
        if kind is float:
            pair = f"{converted}, {k}" if prop_left else f"{k}, {converted}"
            core = f"_dcmp({pair}) {py_op} 0"
        else:
            core = f"{converted} {py_op} {k}" if prop_left else f"{k} {py_op} {converted}"
        if prop_left or op not in ("=", "<>"):
            null_result: bool | None = None
        else:
            # literal = property: a null right side makes '=' FALSE, so '<>' is TRUE
            null_result = op == "<>"
        return t, self.prop(prop), null_result, core, core

    def module(self, node: _Node) -> tuple[str, list[object]]:
        body = self.match_code(node, 0)
        names = [f"_k{index}" for index in range(len(self.constants))]
        lines = [f"def _make({', '.join(names)}):\n", *self.helpers]
        lines.append(
            "    def _match(m):\n"
            "        try:\n"
            f"            return {body}\n"
            "        except _EvalError:\n"
            "            return False\n"
            "    return _match\n"
        )
        return "".join(lines), list(self.constants)


def _always(result: bool) -> Callable[[Mapping[str, str]], bool]:
    def match(properties: Mapping[str, str]) -> bool:
        return result

    return match


@functools.lru_cache(maxsize=256)
def _compile(expression: str) -> Callable[[Mapping[str, str]], bool]:
    if len(expression) > MAX_EXPRESSION_LENGTH:
        raise SqlFilterError(
            f"expression is {len(expression)} characters long, more than the "
            f"{MAX_EXPRESSION_LENGTH} allowed",
            MAX_EXPRESSION_LENGTH,
        )
    if not expression.strip(_WHITESPACE):
        raise SqlFilterError("empty expression at position 0: nothing to filter on", 0, "")
    tree = _Parser(expression).parse()
    if isinstance(tree, _BoolConst):
        return _always(tree.value is True)
    source, constants = _Codegen().module(tree)
    namespace: dict[str, object] = {"__builtins__": {}, **_RUNTIME}
    exec(compile(source, "<sql filter>", "exec"), namespace)
    make = namespace["_make"]
    assert callable(make)
    match: Callable[[Mapping[str, str]], bool] = make(*constants)
    return match


def compile_sql(expression: str) -> Callable[[Mapping[str, str]], bool]:
    """Compile a RocketMQ SQL92 filter; the result tells whether a message with these
    properties is delivered. Raises SqlFilterError for an expression RocketMQ would refuse."""
    if not isinstance(expression, str):
        raise SqlFilterError(f"expression must be a string, got {type(expression).__name__}")
    return _compile(expression)
