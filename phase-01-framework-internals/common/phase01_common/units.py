"""Numbers for people: sizes in sensible units, counts with SI prefixes."""

from __future__ import annotations

_UNITS = ("B", "KB", "MB", "GB", "TB", "PB")


def format_bytes(size: float, *, binary: bool = False) -> str:
    """A byte count in the largest unit that keeps the number at least 1, with three
    significant digits: 2048 → "2.05 KB", 1_500_000 → "1.5 MB", 17 → "17 B".

    Decimal units (1 KB = 1000 B) by default, as file managers and model cards show them;
    ``binary=True`` gives KiB, MiB, ... (powers of 1024).
    """
    if isinstance(size, bool) or not isinstance(size, int | float):
        raise TypeError(f"format_bytes needs a number of bytes, got {type(size).__name__}")
    if size != size or size in (float("inf"), float("-inf")):
        raise ValueError(f"format_bytes needs a finite size, got {size}")
    if size < 0:
        return "-" + format_bytes(-size, binary=binary)
    base = 1024 if binary else 1000
    value, unit = float(size), 0
    while value >= base and unit < len(_UNITS) - 1:
        value /= base
        unit += 1
    if unit == 0:
        return f"{size:g} B"
    # 999.96 KB would round to "1e+03 KB": move it up a unit instead.
    if float(f"{value:.3g}") >= base and unit < len(_UNITS) - 1:
        value /= base
        unit += 1
    name = _UNITS[unit].replace("B", "iB") if binary else _UNITS[unit]
    return f"{value:.3g} {name}" if value < 1000 else f"{value:.0f} {name}"


def format_count(n: float) -> str:
    """A count with an SI prefix and three significant digits, the unit's name to follow:
    ``1234567`` -> ``"1.23 M"`` (so ``f"{format_count(flops)}FLOP"`` reads "1.23 MFLOP"); a
    count under 1000 is whole, with a trailing space: ``12`` -> ``"12 "``."""
    for prefix in ("", "K", "M", "G", "T"):
        if abs(n) < 1000:
            return f"{n:.3g} {prefix}" if prefix else f"{n:.0f} "
        n /= 1000
    return f"{n:.3g} P"
