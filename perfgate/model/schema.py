"""Reading schema-versioned JSON documents: typed field access and migrations.

Every perfgate file (results, baselines) has a ``kind`` and an integer
``schema_version``. A newer version is refused with "upgrade perfgate"; an older one is
upgraded in memory by a chain of small migrations, one per version step. Field access
names the exact path of a bad value ("repeats[2].phases_ms.forward[3]") so the one-line
error says where the file is wrong.

Every value is bounded where it is read, so that what a reader accepts the arithmetic
after it can take (a file may come from a pull request's code): an integer fits in 64
bits (:data:`MAX_INTEGER`; what SQLite, numpy and pandas hold), a number is finite as a
float (a 400-digit integer is not), a per-step duration is zero or from
:data:`MIN_DURATION` to :data:`MAX_DURATION` (a ratio of two of them, its logarithm and a
sum of a window of them stay finite), and a reader can ask for tighter bounds
(:meth:`Fields.integer`, :meth:`Fields.number`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

MAX_INTEGER = 2**63 - 1
"""The largest magnitude of any integer field: a signed 64-bit integer."""
MAX_COUNT = 2**53
"""Counts and byte sizes: integers a float64 holds exactly (9 PB of memory)."""
MAX_DURATION = 1e9
"""The longest per-step duration (in the series' unit: 1e9 ms is 11.6 days a step)."""
MIN_DURATION = 1e-9
"""The shortest per-step duration but zero (1e-9 ms is a picosecond, a thousandth of the
finest clock perfgate reads): the ratio of the longest to the shortest is 1e18, whose
logarithm is 41, far from what a float overflows at."""


def _show(value: int | float) -> str:
    """A number for a one-line message: an integer of many digits by its size only."""
    if isinstance(value, int) and value.bit_length() > 64:
        return f"an integer of about {int(value.bit_length() * math.log10(2)) + 1} digits"
    return f"{value:g}" if isinstance(value, float) else str(value)


def finite_float(value: int | float, where: str) -> float:
    """``value`` (an int or float of a JSON document) as a finite float; ValueError naming
    ``where`` when it is not one (NaN, an infinity, an integer beyond a float's range)."""
    try:
        number = float(value)
    except OverflowError:
        raise ValueError(f"{where}: {_show(value)}, too large for a number") from None
    if not math.isfinite(number):
        raise ValueError(f"{where}: non-finite number")
    return number


class Fields:
    """Typed access to a JSON object with the path of each value in error messages."""

    def __init__(self, data: object, where: str) -> None:
        if not isinstance(data, dict):
            raise ValueError(f"{where or 'top level'}: expected an object, got {type(data).__name__}")
        self.data = data
        self.where = where

    def _path(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def get(self, key: str, kinds: type | tuple[type, ...], *, optional: bool = False) -> Any:
        """The value of ``key``, of one of ``kinds`` (a boolean only where ``bool`` is one);
        an integer of more than 64 bits is refused wherever one is allowed."""
        if key not in self.data:
            if optional:
                return None
            raise ValueError(f"missing field {self._path(key)!r}")
        value = self.data[key]
        if value is None and optional:
            return None
        if isinstance(value, bool) and bool not in (kinds if isinstance(kinds, tuple) else (kinds,)):
            raise ValueError(f"{self._path(key)}: expected {_names(kinds)}, got a boolean")
        if not isinstance(value, kinds):
            raise ValueError(f"{self._path(key)}: expected {_names(kinds)}, got {type(value).__name__}")
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_INTEGER:
            raise ValueError(f"{self._path(key)}: {_show(value)}, out of range (at most 2**63 - 1 in size)")
        return value

    def integer(self, key: str, *, low: int, high: int, optional: bool = False) -> int | None:
        """An integer from ``low`` to ``high`` (None: absent or null, when ``optional``)."""
        value = self.get(key, int, optional=optional)
        if value is not None and not low <= value <= high:
            raise ValueError(f"{self._path(key)}: expected an integer from {low} to {_show(high)}, "
                             f"got {_show(value)}")
        return value

    def number(self, key: str, *, optional: bool = False, positive: bool = False,
               low: float | None = None, high: float | None = None) -> float | None:
        """A finite number (an integer is read as a float), above 0 when ``positive``, and
        from ``low`` to ``high`` when given (None: absent or null, when ``optional``)."""
        value = self.get(key, (int, float), optional=optional)
        if value is None:
            return None
        number = finite_float(value, self._path(key))
        if positive and number <= 0:
            raise ValueError(f"{self._path(key)}: expected a positive number, got {_show(number)}")
        if low is not None and number < low:
            raise ValueError(f"{self._path(key)}: expected at least {_show(low)}, got {_show(number)}")
        if high is not None and number > high:
            raise ValueError(f"{self._path(key)}: expected at most {_show(high)}, got {_show(number)}")
        return number

    def sub(self, key: str) -> Fields:
        return Fields(self.get(key, dict), self._path(key))


def _names(kinds: type | tuple[type, ...]) -> str:
    kinds = kinds if isinstance(kinds, tuple) else (kinds,)
    return " or ".join({int: "an integer", float: "a number", str: "a string", dict: "an object",
                        list: "a list", bool: "a boolean"}.get(k, k.__name__) for k in kinds)


def number_series(values: object, where: str, *, allow_negative: bool = False) -> tuple[float, ...]:
    """A non-empty list of per-step durations: each finite, not negative (unless
    ``allow_negative``) and zero or from :data:`MIN_DURATION` to :data:`MAX_DURATION` in
    size; ValueError naming the first bad value's path (``where[3]``)."""
    if not isinstance(values, list) or not values:
        raise ValueError(f"{where}: expected a non-empty list of numbers")
    out = []
    for i, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ValueError(f"{where}[{i}]: expected a number, got {type(v).__name__}")
        number = finite_float(v, f"{where}[{i}]")
        if number < 0 and not allow_negative:
            raise ValueError(f"{where}[{i}]: negative duration {_show(number)}")
        if abs(number) > MAX_DURATION:
            raise ValueError(f"{where}[{i}]: {_show(number)} is longer than a step can take "
                             f"(at most {_show(MAX_DURATION)})")
        if 0 < abs(number) < MIN_DURATION:
            raise ValueError(f"{where}[{i}]: {_show(number)} is shorter than any clock measures "
                             f"(zero, or at least {_show(MIN_DURATION)})")
        out.append(number)
    return tuple(out)


def _shown(value: object) -> str:
    """A JSON value for a one-line message: a string's repr cut short, a number by :func:`_show`."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return _show(value)
    if value is None or isinstance(value, (bool, str)):
        return repr(value)[:80]
    if isinstance(value, (list, dict)):
        return "a list" if isinstance(value, list) else "a JSON object"
    return type(value).__name__


def migrate(data: dict[str, Any], kind: str, current: int, migrations: Mapping[int, Callable[[dict[str, Any]], dict[str, Any]]]) -> dict[str, Any]:
    """Check the kind and version of a document and upgrade an older one in memory."""
    if data.get("kind") != kind:
        raise ValueError(f"not a {kind} file (kind is {_shown(data.get('kind'))})")
    version = data.get("schema_version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ValueError(f"schema_version must be a positive integer, got {_shown(version)}")
    if version > current:
        raise ValueError(
            f"schema version {_show(version)} is newer than this perfgate understands ({current}); upgrade perfgate"
        )
    while version < current:
        data = migrations[version](data)
        version += 1
        data["schema_version"] = version
    return data
