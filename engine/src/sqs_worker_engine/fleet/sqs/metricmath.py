"""CloudWatch metric math, the part an autoscaling alarm's expression uses here: + - * /
over numbers and metric ids. Read from the stack and evaluated on the simulator's
datapoints; anything else is refused when the stack is read (`check`)."""

from __future__ import annotations

import ast


def evaluate(expression: str, values: dict[str, float]) -> float | None:
    """A metric math expression of + - * / over numbers and metric ids (None: no value,
    as CloudWatch gives none for a division by zero)."""

    def value(node: ast.expr) -> float:
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
    except ZeroDivisionError:
        return None


def check(expression: str, ids: set[str]) -> str | None:
    """Why `expression` cannot be evaluated over `ids` (None: it can)."""
    try:
        evaluate(expression, dict.fromkeys(ids, 1.0))
    except (ValueError, SyntaxError) as exc:
        return str(exc)
    return None
