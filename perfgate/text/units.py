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
        return "  ".join(c.ljust(w) if a == "l" else c.rjust(w) for c, w, a in zip(cells, widths, align, strict=True)).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def change_ci(ratio: float, low: float, high: float) -> str:
    """``+6.1% [+3.2, +9.0]``: a ratio and its interval as percent changes."""
    return f"{(ratio - 1) * 100:+.1f}% [{(low - 1) * 100:+.1f}, {(high - 1) * 100:+.1f}]"


def duration(seconds: float) -> str:
    """A wall time as people say it: "48 s", "3 min 10 s", "1 h 2 min"."""
    total = max(int(round(seconds)), 0)
    if total < 60:
        return f"{total} s"
    minutes, rest = divmod(total, 60)
    if minutes < 60:
        return f"{minutes} min {rest} s" if rest else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if minutes else f"{hours} h"


_DURATION_UNITS = {"s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def parse_duration(text: object, where: str = "budget") -> float:
    """``"20m"``, ``"90s"``, ``"1.5h"`` or a number of seconds, as seconds (> 0, at most a week).

    ValueError naming ``where`` on anything else."""
    if isinstance(text, bool):
        raise ValueError(f"{where}: expected a duration such as 20m, 90s or 1h, got {text!r}")
    if isinstance(text, (int, float)):
        value = float(text)
    elif isinstance(text, str) and len(text) <= 32:
        raw = text.strip().lower()
        unit = next((u for u in ("min", "s", "m", "h") if raw.endswith(u)), "")
        number = raw[: len(raw) - len(unit)].strip()
        try:
            value = float(number) * _DURATION_UNITS.get(unit, 1.0)
        except ValueError:
            raise ValueError(f"{where}: expected a duration such as 20m, 90s or 1h, got {text!r}") from None
    else:
        raise ValueError(f"{where}: expected a duration such as 20m, 90s or 1h, got {text!r}")
    if not (value > 0 and value <= 7 * 24 * 3600.0):  # also refuses nan
        raise ValueError(f"{where}: must be more than 0 and at most a week, got {text!r}")
    return value
