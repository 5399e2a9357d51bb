"""CloudWatch metric math, the part the stack's alarms use here: + - * / over numbers and
metric ids, FILL(id, number) (the number where the metric has no datapoint) and DIFF(id)
(this datapoint less the one before). Read from the stack and evaluated on the simulator's
datapoints; anything else is refused when the stack is read (`check`)."""

from __future__ import annotations

import ast


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
        return value(ast.parse(expression, mode="eval").body)
    except ArithmeticError:  # a division by zero, a DIFF with nothing before
        return None


def check(expression: str, ids: set[str]) -> str | None:
    """Why `expression` cannot be evaluated over `ids` (None: it can)."""
    try:
        evaluate(expression, dict.fromkeys(ids, 1.0), dict.fromkeys(ids, 1.0))
    except (ValueError, SyntaxError) as exc:
        return str(exc)
    return None
