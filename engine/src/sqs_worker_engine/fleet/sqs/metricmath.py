"""CloudWatch metric math, the part the stack's alarms use here: + - * / over numbers and
metric ids, FILL(id, number) (the number where the metric has no datapoint), DIFF(id)
(this datapoint less the one before), and IF(condition, then, else) over comparisons
(> >= < <= == !=, 1 when true, 0 when false) joined by AND / OR. Read from the stack and
evaluated on the simulator's datapoints; anything else is refused when the stack is read
(`check`)."""

from __future__ import annotations

import ast
import operator
import re
from collections.abc import Callable

_COMPARE: dict[type[ast.cmpop], Callable[[float, float], bool]] = {
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
}
# CloudWatch's logical operators, written as Python's so that the expression parses.
_LOGICAL = ((re.compile(r"\bAND\b|&&"), " and "), (re.compile(r"\bOR\b|\|\|"), " or "))


class NoValueError(ArithmeticError):
    """The expression has no value for this datapoint (CloudWatch publishes none)."""


def evaluate(expression: str, values: dict[str, float], previous: dict[str, float] | None = None) -> float | None:
    """A metric math expression over numbers and metric ids (None: no value, as CloudWatch
    gives none for a division by zero, or DIFF without a datapoint before)."""

    def value(node: ast.expr) -> float:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args:
            name = node.args[0]
            if node.func.id == "FILL" and isinstance(name, ast.Name) and len(node.args) == 2:
                return values[name.id] if name.id in values else value(node.args[1])
            if node.func.id == "DIFF" and isinstance(name, ast.Name) and len(node.args) == 1:
                if previous is None or name.id not in previous:
                    raise NoValueError(f"DIFF({name.id}) has no datapoint before")
                return value(name) - previous[name.id]
            if node.func.id == "IF" and len(node.args) == 3:
                # Only the branch taken is evaluated: a division by zero in the other costs nothing.
                return value(node.args[1]) if value(node.args[0]) else value(node.args[2])
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _COMPARE:
            return float(_COMPARE[type(node.ops[0])](value(node.left), value(node.comparators[0])))
        if isinstance(node, ast.BoolOp):
            truths = [bool(value(v)) for v in node.values]
            return float(all(truths) if isinstance(node.op, ast.And) else any(truths))
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
            return float(node.value)
        if isinstance(node, ast.Name) and node.id in values:
            return values[node.id]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -value(node.operand)
        if isinstance(node, ast.BinOp):
            left, right = value(node.left), value(node.right)
            if isinstance(node.op, ast.Add):
                return left + right
            if isinstance(node.op, ast.Sub):
                return left - right
            if isinstance(node.op, ast.Mult):
                return left * right
            if isinstance(node.op, ast.Div):
                return left / right
        raise ValueError(f"not simulated in a metric math expression: {ast.unparse(node)}")

    try:
        return value(ast.parse(_python(expression), mode="eval").body)
    except ArithmeticError:  # a division by zero, a DIFF with nothing before
        return None


def check(expression: str, ids: set[str]) -> str | None:
    """Why `expression` cannot be evaluated over `ids` (None: it can), each branch of an IF
    included (an evaluation takes only one)."""
    try:
        parts = [expression] + [
            ast.unparse(arg)
            for node in ast.walk(ast.parse(_python(expression), mode="eval"))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "IF"
            for arg in node.args
        ]
        for part in parts:
            evaluate(part, dict.fromkeys(ids, 1.0), dict.fromkeys(ids, 1.0))
    except (ValueError, SyntaxError) as exc:
        return str(exc)
    return None


def _python(expression: str) -> str:
    """The expression with CloudWatch's logical operators written as Python's."""
    for pattern, python in _LOGICAL:
        expression = pattern.sub(python, expression)
    return expression
