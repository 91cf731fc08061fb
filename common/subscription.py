"""Subscription expressions: ``*`` (everything) or ``TagA || TagB``."""


def parse_sub_expression(expression: str) -> frozenset[str] | None:
    """The tags an expression selects; None for everything. ValueError for an empty tag."""
    expression = expression.strip()
    if not expression or expression == "*":
        return None
    tags = [t.strip() for t in expression.split("||")]
    if any(not t for t in tags):
        raise ValueError(f"subscription expression {expression!r} has an empty tag")
    return frozenset(tags)


def expression_selects(expression: str) -> frozenset[str] | str | None:
    """What a subscription expression selects, to compare two: its tags (so "TagA || TagB" and "TagB||TagA" are
    one), None for every tag, or the expression as written when it does not parse (it still differs from others)."""
    try:
        return parse_sub_expression(expression)
    except ValueError:
        return expression
