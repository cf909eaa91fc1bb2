"""Reading schema-versioned JSON documents: typed field access and migrations.

Every perfgate file (results, baselines) has a ``kind`` and an integer
``schema_version``. A newer version is refused with "upgrade perfgate"; an older one is
upgraded in memory by a chain of small migrations, one per version step. Field access
names the exact path of a bad value ("repeats[2].phases_ms.forward[3]") so the one-line
error says where the file is wrong.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any


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
        return value

    def number(self, key: str, *, optional: bool = False, positive: bool = False) -> float | None:
        value = self.get(key, (int, float), optional=optional)
        if value is None:
            return None
        if not math.isfinite(value):
            raise ValueError(f"{self._path(key)}: non-finite number")
        if positive and value <= 0:
            raise ValueError(f"{self._path(key)}: expected a positive number, got {value}")
        return float(value)

    def sub(self, key: str) -> Fields:
        return Fields(self.get(key, dict), self._path(key))


def _names(kinds: type | tuple[type, ...]) -> str:
    kinds = kinds if isinstance(kinds, tuple) else (kinds,)
    return " or ".join({int: "an integer", float: "a number", str: "a string", dict: "an object",
                        list: "a list", bool: "a boolean"}.get(k, k.__name__) for k in kinds)


def number_series(values: object, where: str, *, allow_negative: bool = False) -> tuple[float, ...]:
    if not isinstance(values, list) or not values:
        raise ValueError(f"{where}: expected a non-empty list of numbers")
    out = []
    for i, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ValueError(f"{where}[{i}]: expected a number, got {type(v).__name__}")
        if not math.isfinite(v):
            raise ValueError(f"{where}[{i}]: non-finite number")
        if v < 0 and not allow_negative:
            raise ValueError(f"{where}[{i}]: negative duration {v}")
        out.append(float(v))
    return tuple(out)


def migrate(data: dict[str, Any], kind: str, current: int, migrations: Mapping[int, Callable[[dict[str, Any]], dict[str, Any]]]) -> dict[str, Any]:
    """Check the kind and version of a document and upgrade an older one in memory."""
    if data.get("kind") != kind:
        raise ValueError(f"not a {kind} file (kind is {data.get('kind')!r})")
    version = data.get("schema_version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ValueError(f"schema_version must be a positive integer, got {version!r}")
    if version > current:
        raise ValueError(
            f"schema version {version} is newer than this perfgate understands ({current}); upgrade perfgate"
        )
    while version < current:
        data = migrations[version](data)
        version += 1
        data["schema_version"] = version
    return data


