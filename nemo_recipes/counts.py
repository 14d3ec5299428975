"""Counts as people write and read them: '300B' tokens, '1.32B' parameters. Standard library only: the catalog's
overrides, the planner's CLI and the tables all read and print counts this way.
"""

from __future__ import annotations

from typing import Iterable

_SUFFIXES = (("T", 10**12), ("B", 10**9), ("M", 10**6), ("K", 10**3))


def human_count(n: float) -> str:
    """1315819520 -> '1.32B', 174615846912 -> '175B': three significant digits, SI-like suffix."""
    for suffix, scale in _SUFFIXES:
        if abs(n) >= scale:
            value = n / scale
            digits = 2 if value < 10 else 1 if value < 100 else 0
            return f"{value:.{digits}f}{suffix}"
    return f"{n:g}"


# Counts with more digits are not read as numbers (Python refuses to print integers of over 4300 digits).
_COUNT_DIGITS = 4000


def parse_count(text: str) -> int:
    """'300B' -> 300_000_000_000; also '1.5T', '375M', '2K', '1e9', '1_000', exactly (no float rounding).
    ValueError when not a finite whole number."""
    import decimal  # only when a count is read: `ls`, `show` and `plan` start without it

    cleaned = text.strip().replace("_", "").replace(",", "")
    scale = 1
    if cleaned and cleaned[-1].upper() in dict(_SUFFIXES):
        scale = dict(_SUFFIXES)[cleaned[-1].upper()]
        cleaned = cleaned[:-1]
    try:
        value = decimal.Decimal(cleaned) * scale
    except (ArithmeticError, ValueError):  # decimal signals (invalid, overflow) are ArithmeticErrors
        raise ValueError(f"{text!r} is not a number") from None
    if not value.is_finite() or value.adjusted() >= _COUNT_DIGITS:
        raise ValueError(f"{text!r} is not a finite number")
    if value != value.to_integral_value():
        raise ValueError(f"{text!r} is not a whole number")
    return int(value)


def divisors(n: int) -> list[int]:
    """The divisors of `n`, smallest first: the sizes a parallel split of `n` GPUs, layers or heads can take."""
    return [d for d in range(1, n + 1) if n % d == 0]


def listing(values: Iterable[int], limit: int = 8) -> str:
    """Counts a fix offers, as a reader scans them: '1, 2, 4, 8', the first `limit` then '...'."""
    values = list(values)
    shown = ", ".join(str(v) for v in values[:limit])
    return shown + (", ..." if len(values) > limit else "")
