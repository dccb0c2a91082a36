"""Arithmetic that evaluates on Python ints and on Z3 terms alike.

The scheduler's rules (the clamps, the block counts) and the invariants are
written once, with these helpers instead of `min`, `if` and `and`, so that the
same function computes a concrete step in the reference and builds a formula
in `proofs/`. With plain ints each helper is the obvious Python; with a Z3
term it builds the matching expression. Nothing here imports z3 eagerly.
"""

from __future__ import annotations

from typing import Any

# Plain values, tested first by identity of type: a monitor asks "symbolic?" ~25,000 times a step of a large
# trace, and the module-name test alone was the largest cost of `schedspec check`.
_CONCRETE = frozenset({bool, int, float, str, type(None)})


def is_symbolic(x: Any) -> bool:
    return type(x) not in _CONCRETE and type(x).__module__.startswith("z3")


def _z3() -> Any:  # the z3 module: it ships no stubs, so mypy sees it as Any
    import z3

    return z3


# The reference calls these helpers about ten times per request per step, always on plain ints, so each one
# answers that case first without calling another function: a Python call costs more than the arithmetic.


def ite(cond: Any, then: Any, otherwise: Any) -> Any:
    if (type(cond) not in _CONCRETE or type(then) not in _CONCRETE or type(otherwise) not in _CONCRETE) and (
        is_symbolic(cond) or is_symbolic(then) or is_symbolic(otherwise)
    ):
        return _z3().If(cond, then, otherwise)
    return then if cond else otherwise


def min_(a: Any, b: Any) -> Any:
    if type(a) is int and type(b) is int:
        return a if a <= b else b
    return ite(a <= b, a, b)


def max_(a: Any, b: Any) -> Any:
    if type(a) is int and type(b) is int:
        return a if a >= b else b
    return ite(a >= b, a, b)


def and_(*xs: Any) -> Any:
    for x in xs:
        if type(x) not in _CONCRETE and is_symbolic(x):
            return _z3().And(*xs)
    return all(xs)


def or_(*xs: Any) -> Any:
    for x in xs:
        if type(x) not in _CONCRETE and is_symbolic(x):
            return _z3().Or(*xs)
    return any(xs)


def not_(x: Any) -> Any:
    return _z3().Not(x) if type(x) not in _CONCRETE and is_symbolic(x) else not x


def implies(a: Any, b: Any) -> Any:
    if (type(a) not in _CONCRETE or type(b) not in _CONCRETE) and (is_symbolic(a) or is_symbolic(b)):
        return _z3().Implies(a, b)
    return (not a) or b


def cdiv(a: Any, b: Any) -> Any:
    """Ceiling division for a >= 0, b > 0 (vLLM's `cdiv`); Z3's `/` on Ints floors for b > 0."""
    if type(a) is int and type(b) is int:
        return -(-a // b)
    if is_symbolic(a) or is_symbolic(b):
        return (a + b - 1) / b
    return -(-a // b)


def fdiv(a: Any, b: Any) -> Any:
    """Floor division for b > 0; Z3's `/` on Ints floors for b > 0."""
    if is_symbolic(a) or is_symbolic(b):
        return a / b
    return a // b


def maybe(x: Any) -> bool:
    """For filtering rows: a concrete flag as itself, a symbolic one as "possibly"."""
    return True if is_symbolic(x) else bool(x)


def plus(total: Any, *terms: Any) -> Any:
    """total + terms, leaving out literal zeros, so a feature that is off adds no term to a formula.

    Only a plain `int` 0 is left out (tested by type, not by `==`): a
    CrossHair symbolic int must not fork a path on "is it zero?".
    """
    for t in terms:
        if not (type(t) is int and t == 0):
            total = total + t
    return total


# Lexicographic order on key tuples (the victim key, the heap key), for ints and Z3 terms alike. The shapes are
# the ones the encoding was proved with: a pair key builds `Or(a0 > b0, And(a0 == b0, a1 > b1))`, and `lex_lt`
# splits off the last component (the heap's id tie-break) from a prefix compared with `lex_gt`.


def lex_gt(a: tuple[Any, ...], b: tuple[Any, ...]) -> Any:
    if len(a) == 1:
        return a[0] > b[0]
    return or_(a[0] > b[0], and_(a[0] == b[0], lex_gt(a[1:], b[1:])))


def lex_ge(a: tuple[Any, ...], b: tuple[Any, ...]) -> Any:
    if len(a) == 1:
        return a[0] >= b[0]
    return or_(a[0] > b[0], and_(a[0] == b[0], lex_ge(a[1:], b[1:])))


def lex_lt(a: tuple[Any, ...], b: tuple[Any, ...]) -> Any:
    if len(a) == 1:
        return a[0] < b[0]
    return or_(lex_gt(b[:-1], a[:-1]), and_(lex_eq(a[:-1], b[:-1]), a[-1] < b[-1]))


def lex_eq(a: tuple[Any, ...], b: tuple[Any, ...]) -> Any:
    return and_(*[x == y for x, y in zip(a, b)])
