# ~/~ begin <<docs/foundations.md#src/minimodel/checks.py>>[init]
"""The integer check every module of minimodel shares. Pure Python: it imports nothing.

Tangled from docs/foundations.md; edit the page, not this file.
"""

__all__ = ["check_int"]


def check_int(name: str, value: object, lo: int | None = None, hi: int | None = None) -> int:
    """value if it is an int (not a bool) in [lo, hi], None leaving that side open; else
    ValueError naming `name` and the value."""
    if (isinstance(value, bool) or not isinstance(value, int)
            or (lo is not None and value < lo) or (hi is not None and value > hi)):
        if lo is None:
            bound = "" if hi is None else f" <= {hi}"
        else:
            bound = f" >= {lo}" if hi is None else f" in [{lo}, {hi}]"
        raise ValueError(f"{name} must be an int{bound}, got {value!r}")
    return value
# ~/~ end
