"""Numbers for people: counts with SI prefixes, sizes in the unit that fits (2 KB, not 0.00 MB)."""

from __future__ import annotations


def human_count(n: float) -> str:
    """``1234567`` -> ``'1.23 M'`` (a trailing space where there is no prefix: ``'12 '``)."""
    for unit in ("", "K", "M", "G", "T"):
        if abs(n) < 1000:
            return f"{n:.3g} {unit}" if unit else f"{n:.0f} "
        n /= 1000
    return f"{n:.3g} P"


def human_bytes(n: float) -> str:
    """Bytes in B, KiB, MiB or GiB, whichever keeps the number between 1 and 1024."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # pragma: no cover - the loop always returns
