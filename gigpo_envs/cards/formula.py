"""Arithmetic formulas over card values: exact evaluation and an enumerating solver.

A formula is a list of tokens: numbers (``"1"`` .. ``"10"``), operators ``+ - * /`` and
parentheses. Evaluation uses :class:`fractions.Fraction`, so ``8 / 3 * 3`` is exactly 8, and
never calls ``eval``.
"""

from __future__ import annotations

from fractions import Fraction
from functools import lru_cache

OPERATORS = ("+", "-", "*", "/")
PARENTHESES = ("(", ")")


def evaluate(tokens: list[str]) -> Fraction | None:
    """Returns the exact value of a formula, or None if it is malformed or divides by zero.

    Grammar: ``expr := term (("+" | "-") term)*``, ``term := factor (("*" | "/") factor)*``,
    ``factor := NUMBER | "(" expr ")"``. No unary minus.
    """
    parser = _Parser(tokens)
    try:
        value = parser.expression()
    except (_SyntaxError, ZeroDivisionError):
        return None
    if parser.position != len(tokens):
        return None
    return value


class _SyntaxError(Exception):
    pass


class _Parser:
    def __init__(self, tokens: list[str]) -> None:
        self.tokens = tokens
        self.position = 0

    def _peek(self) -> str | None:
        return self.tokens[self.position] if self.position < len(self.tokens) else None

    def expression(self) -> Fraction:
        value = self.term()
        while self._peek() in ("+", "-"):
            operator = self.tokens[self.position]
            self.position += 1
            right = self.term()
            value = value + right if operator == "+" else value - right
        return value

    def term(self) -> Fraction:
        value = self.factor()
        while self._peek() in ("*", "/"):
            operator = self.tokens[self.position]
            self.position += 1
            right = self.factor()
            value = value * right if operator == "*" else value / right
        return value

    def factor(self) -> Fraction:
        token = self._peek()
        if token is None:
            raise _SyntaxError("formula ends early")
        self.position += 1
        if token == "(":
            value = self.expression()
            if self._peek() != ")":
                raise _SyntaxError("unclosed parenthesis")
            self.position += 1
            return value
        if token.isdigit():
            return Fraction(int(token))
        raise _SyntaxError(f"unexpected token {token!r}")


def numbers_used(tokens: list[str]) -> list[int]:
    """Returns the numbers of a formula, in order."""
    return [int(token) for token in tokens if token.isdigit()]


def solve(values: list[int] | tuple[int, ...], target: int) -> list[str] | None:
    """Returns a formula that uses each value exactly once and equals ``target``, or None.

    Enumerates every way to combine two of the remaining numbers with ``+ - * /`` until one
    number is left (exact arithmetic). Compound operands are parenthesized, so the formula
    reads unambiguously, e.g. ``["(", "10", "-", "4", ")", "*", "2"]``.
    """
    solution = _solve_sorted(tuple(sorted(int(v) for v in values)), Fraction(target))
    return list(solution) if solution is not None else None


def is_solvable(values: list[int] | tuple[int, ...], target: int) -> bool:
    """True if :func:`solve` finds a formula."""
    return _solve_sorted(tuple(sorted(int(v) for v in values)), Fraction(target)) is not None


@lru_cache(maxsize=65536)
def _solve_sorted(values: tuple[int, ...], target: Fraction) -> tuple[str, ...] | None:
    items = tuple((Fraction(v), (str(v),)) for v in values)
    return _search(items, target)


def _search(
    items: tuple[tuple[Fraction, tuple[str, ...]], ...], target: Fraction
) -> tuple[str, ...] | None:
    if len(items) == 1:
        return items[0][1] if items[0][0] == target else None
    for i in range(len(items)):
        for j in range(i + 1, len(items)):
            rest = items[:i] + items[i + 1 : j] + items[j + 1 :]
            for value, tokens in _combinations(items[i], items[j]):
                found = _search(rest + ((value, tokens),), target)
                if found is not None:
                    return found
    return None


def _combinations(
    a: tuple[Fraction, tuple[str, ...]], b: tuple[Fraction, tuple[str, ...]]
) -> list[tuple[Fraction, tuple[str, ...]]]:
    (x, tx), (y, ty) = a, b
    px = ("(", *tx, ")") if len(tx) > 1 else tx
    py = ("(", *ty, ")") if len(ty) > 1 else ty
    results = [
        (x + y, (*px, "+", *py)),
        (x * y, (*px, "*", *py)),
        (x - y, (*px, "-", *py)),
        (y - x, (*py, "-", *px)),
    ]
    if y != 0:
        results.append((x / y, (*px, "/", *py)))
    if x != 0:
        results.append((y / x, (*py, "/", *px)))
    return results
