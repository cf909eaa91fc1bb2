"""How numbers are written in every report: milliseconds, percentages, bytes."""

from __future__ import annotations


def ms(value: float | None) -> str:
    if value is None:
        return "—"
    magnitude = abs(value)
    if magnitude >= 100:
        return f"{value:.1f}"
    if magnitude >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}"


def percent(value: float | None, digits: int = 1, signed: bool = False) -> str:
    if value is None:
        return "—"
    return f"{value * 100:+.{digits}f}%" if signed else f"{value * 100:.{digits}f}%"


def size(num_bytes: int | None) -> str:
    if num_bytes is None:
        return "—"
    value = float(num_bytes)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.2f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def table(headers: list[str], rows: list[list[str]], align: str) -> str:
    """A plain-text table; ``align`` has one ``l`` or ``r`` per column."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]

    def line(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) if a == "l" else c.rjust(w) for c, w, a in zip(cells, widths, align)).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def change_ci(ratio: float, low: float, high: float) -> str:
    """``+6.1% [+3.2, +9.0]``: a ratio and its interval as percent changes."""
    return f"{(ratio - 1) * 100:+.1f}% [{(low - 1) * 100:+.1f}, {(high - 1) * 100:+.1f}]"
