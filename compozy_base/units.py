"""Numbers shown to a person: byte sizes in B, KiB, MiB or GiB. Imports nothing (the CLI's import-cost rule)."""

from __future__ import annotations


def size(n: int) -> str:
    """`512 B`, `1.5 KiB`, `3.2 MiB`, `26.0 GiB`: the largest unit under 1024 of it, GiB at most."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"
