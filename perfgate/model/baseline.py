"""Baselines: what ``baselines/<env-key>/<workload>.json`` holds, committed and reviewed.

A baseline holds one or more *recordings* (one per ``rebaseline`` run, on different days
or CI jobs when made with ``--append``), so the day-to-day noise of the runner can be
estimated from the baseline itself. Each recording keeps, per repeat, the raw per-step
values (each series one line of space-separated milliseconds, so a baseline stays
reviewable in a pull request), the throughput and the peak memory, and beside them, for a
reader of the file, the medians and shares derived from the raw values. On load they are
derived again from the raw values, which are the data: a file whose two disagree is refused.

Files are written atomically and only by ``rebaseline`` (``perfgate.store.baselines``);
reading never modifies them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from statistics import median
from typing import Any

from perfgate.model.environment import Environment
from perfgate.model.result import ROWS, describe_slowdown, row_medians, row_shares
from perfgate.model.schema import Fields, migrate, number_series
from perfgate.model.workload import PHASES

BASELINE_KIND = "perfgate.baseline"
BASELINE_SCHEMA_VERSION = 1
BASELINE_MIGRATIONS: dict[int, Any] = {}
DEFAULT_MAX_RECORDINGS = 10


@dataclass(frozen=True)
class BaselineRepeat:
    medians_ms: Mapping[str, float]
    shares: Mapping[str, float]
    samples_per_s: float
    peak_memory_bytes: int | None
    raw_ms: Mapping[str, tuple[float, ...]]
    throttled: bool = False
    """The GPU slowed down for heat or by hardware during this repeat; the gate leaves it out.
    Written by perfgate before the power cap stopped counting, it may mean the power cap:
    see :attr:`throttle_reason`."""
    slowdown_reasons: tuple[str, ...] | None = None
    """The thermal and hardware slowdown reasons NVML reported (``()``: none); None: not
    recorded (a baseline written before they were kept)."""
    sm_clock_mhz: float | None = None
    """The median SM clock during the repeat (None: not sampled, or not recorded)."""
    power_cap_share: float | None = None
    """The share of samples in which the software power cap held the clock: shown, never a reason to leave out."""

    @property
    def throttle_reason(self) -> str | None:
        """Why the gate leaves this repeat out, in words; None when it does not.

        A repeat recorded as throttled before the reasons were kept is left out, as it was
        then, and says so: the flag then also meant the power cap, but nothing tells which
        (a rebaseline records the reasons)."""
        if self.slowdown_reasons:
            return describe_slowdown(self.slowdown_reasons)
        return describe_slowdown(None) if self.throttled else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "throttled": self.throttled,
            "slowdown_reasons": list(self.slowdown_reasons) if self.slowdown_reasons is not None else None,
            "sm_clock_mhz": self.sm_clock_mhz,
            "power_cap_share": self.power_cap_share,
            "medians_ms": dict(self.medians_ms),
            "shares": dict(self.shares),
            "samples_per_s": self.samples_per_s,
            "peak_memory_bytes": self.peak_memory_bytes,
            "raw_ms": {k: " ".join(raw_text(v) for v in values) for k, values in self.raw_ms.items()},
        }


@dataclass(frozen=True)
class Provenance:
    commit: str | None
    dirty: bool | None
    date: str
    reason: str
    perfgate_version: str
    ci_run_id: str | None
    ci_run_url: str | None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Recording:
    provenance: Provenance
    environment: Environment
    data: Mapping[str, Any]
    peak_memory_kind: str
    repeats: tuple[BaselineRepeat, ...]

    def medians(self, row: str) -> list[float]:
        return [r.medians_ms[row] for r in self.repeats]

    def to_dict(self) -> dict[str, Any]:
        return {
            "provenance": self.provenance.to_dict(),
            "environment": self.environment.to_dict(),
            "data": dict(self.data),
            "peak_memory_kind": self.peak_memory_kind,
            "repeats": [r.to_dict() for r in self.repeats],
        }


@dataclass(frozen=True)
class LeftOut:
    """What :meth:`Baseline.without_throttled` left out, and the lines that say so."""

    throttled: int = 0
    """Repeats recorded while the GPU throttled."""
    short_recordings: tuple[int, ...] = ()
    """Recordings (numbered from 1) dropped whole: a single repeat was left in each."""
    messages: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.throttled or self.short_recordings)


@dataclass(frozen=True)
class Baseline:
    workload: str
    workload_version: int
    device: str
    environment_key: str
    params: Mapping[str, Any]
    recordings: tuple[Recording, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": BASELINE_KIND,
            "schema_version": BASELINE_SCHEMA_VERSION,
            "workload": self.workload,
            "workload_version": self.workload_version,
            "device": self.device,
            "environment_key": self.environment_key,
            "params": dict(self.params),
            "recordings": [r.to_dict() for r in self.recordings],
        }

    def recording_medians(self, row: str) -> list[list[float]]:
        return [rec.medians(row) for rec in self.recordings]

    def without_throttled(self) -> tuple[Baseline, LeftOut]:
        """The baseline less its throttled repeats, and what was left out, for the report.

        A repeat is throttled when the GPU slowed down for heat or by hardware while it was
        recorded (:attr:`BaselineRepeat.throttle_reason`); the messages name the reason.

        A recording left empty is dropped. So is one left with a single repeat, when a
        recording of two or more remains: one repeat shows no run-to-run variation, the
        statistics refuse it, and keeping it would turn the whole workload into an ERROR
        that the other recordings can avoid. When none of two or more remains, the
        single repeats are kept so that the refusal says why.
        """
        kept = [tuple(r for r in rec.repeats if r.throttle_reason is None) for rec in self.recordings]
        throttled = sum(len(rec.repeats) - len(k) for rec, k in zip(self.recordings, kept))
        why: dict[str, int] = {}
        for rec in self.recordings:
            for r in rec.repeats:
                if r.throttle_reason is not None:
                    why[r.throttle_reason] = why.get(r.throttle_reason, 0) + 1
        usable = any(len(k) >= 2 for k in kept)
        recordings = []
        short: list[int] = []
        for j, (rec, repeats) in enumerate(zip(self.recordings, kept)):
            if not repeats:
                continue
            if len(repeats) == 1 and len(rec.repeats) > 1 and usable:
                short.append(j + 1)  # numbered from 1, as the reports number recordings
                continue
            recordings.append(dataclasses.replace(rec, repeats=repeats))
        messages = []
        if throttled:
            parts = [reason if len(why) == 1 else f"{reason} in {n}" for reason, n in why.items()]
            rebaseline = "; a rebaseline records the reasons" if describe_slowdown(None) in why else ""
            messages.append(f"{throttled} baseline repeat(s) left out: {'; '.join(parts)}{rebaseline}")
        messages += [f"baseline recording {j} left out: 1 repeat was left once its throttled repeats were left "
                     "out, and a recording needs at least 2" for j in short]
        return (dataclasses.replace(self, recordings=tuple(recordings)),
                LeftOut(throttled, tuple(short), tuple(messages)))

    def sm_clock_mhz(self) -> float | None:
        """The median of its repeats' median SM clocks (None: no repeat recorded one)."""
        clocks = [r.sm_clock_mhz for rec in self.recordings for r in rec.repeats if r.sm_clock_mhz is not None]
        return median(clocks) if clocks else None

    def peak_memory(self) -> list[float]:
        return [float(r.peak_memory_bytes) for rec in self.recordings for r in rec.repeats
                if r.peak_memory_bytes is not None]


def param_differences(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
    return {k: (a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)}


def _raw_series(text: object, where: str) -> tuple[float, ...]:
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"{where}: expected a non-empty string of numbers")
    try:
        values = [float(v) for v in text.split()]
    except ValueError:
        raise ValueError(f"{where}: not a list of numbers") from None
    return number_series(values, where, allow_negative=False)


MEDIAN_TOLERANCE_MS = 0.005
"""How far a stored median may lie from the one derived from the stored raw values. Raw values
are written to nine significant digits; files from before were written to 0.001 ms, by which a
residual (the step less five phases) can move by 0.003 ms."""


def raw_text(value: float) -> str:
    """A raw per-step value as the file holds it: nine significant digits, enough that the
    medians derived from the file are those of the measured values (a micro-benchmark's step
    can be a few microseconds)."""
    return f"{value:.9g}"
SHARE_TOLERANCE = 0.001


def derived_rows(raw: Mapping[str, tuple[float, ...]], where: str) -> tuple[dict[str, float], dict[str, float]]:
    """The medians and shares of a repeat, derived from its raw per-step values (None: no step
    series stored). A repeat stored without phase series (a micro-benchmark) has zero phases."""
    if "step" not in raw:
        return None
    step = raw["step"]
    present = [p for p in PHASES if p in raw]
    if present and len(present) != len(PHASES):
        missing = ", ".join(p for p in PHASES if p not in raw)
        raise ValueError(f"{where}: raw values of some phases but not of {missing}")
    if any(len(raw[p]) != len(step) for p in present):
        raise ValueError(f"{where}: the raw series differ in length")
    series = {p: raw[p] if present else (0.0,) * len(step) for p in PHASES}
    series["step"] = step
    return row_medians(series), row_shares(series)


def _repeat_from_dict(data: object, where: str) -> BaselineRepeat:
    f = Fields(data, where)
    medians = f.sub("medians_ms")
    shares = f.sub("shares")
    raw = f.sub("raw_ms")
    medians_ms = {}
    for row in ROWS:
        value = medians.number(row)
        if row != "residual" and value is not None and value < 0:
            raise ValueError(f"{medians.where}.{row}: negative duration {value}")
        medians_ms[row] = value
    shares_of = {row: shares.number(row) for row in ROWS}
    raw_ms = {k: _raw_series(v, f"{raw.where}.{k}") for k, v in raw.data.items()}
    derived = derived_rows(raw_ms, raw.where)
    # The raw values are the data; the stored medians and shares only repeat them for a
    # reader of the file. A file whose two disagree was edited: refused, never guessed.
    for row in ROWS:
        if abs(derived[0][row] - medians_ms[row]) > MEDIAN_TOLERANCE_MS + 1e-6 * abs(medians_ms[row]):
            raise ValueError(f"{medians.where}.{row}: {medians_ms[row]} is not the median of the raw values "
                             f"({derived[0][row]:.4f})")
        if abs(derived[1][row] - shares_of[row]) > SHARE_TOLERANCE:
            raise ValueError(f"{shares.where}.{row}: {shares_of[row]} is not the share the raw values give "
                             f"({derived[1][row]:.4f})")
    medians_ms, shares_of = derived
    peak = f.get("peak_memory_bytes", int, optional=True)
    if peak is not None and peak < 0:
        raise ValueError(f"{where}.peak_memory_bytes: negative peak memory {peak}")
    return BaselineRepeat(
        medians_ms=medians_ms,  # type: ignore[arg-type]
        shares=shares_of,  # type: ignore[arg-type]
        samples_per_s=f.number("samples_per_s", positive=True),  # type: ignore[arg-type]
        peak_memory_bytes=peak,
        raw_ms=raw_ms,
        throttled=bool(f.get("throttled", bool, optional=True)),
        slowdown_reasons=_slowdown_reasons(f.get("slowdown_reasons", list, optional=True), where),
        sm_clock_mhz=_optional_number(f, "sm_clock_mhz", upper=None),
        power_cap_share=_optional_number(f, "power_cap_share", upper=1.0),
    )


def _slowdown_reasons(data: list | None, where: str) -> tuple[str, ...] | None:
    if data is None:
        return None
    if not all(isinstance(x, str) for x in data):
        raise ValueError(f"{where}.slowdown_reasons: expected a list of reason names")
    return tuple(data)


def _optional_number(f: Fields, name: str, *, upper: float | None) -> float | None:
    value = f.number(name, optional=True)
    if value is not None and (value < 0 or (upper is not None and value > upper)):
        raise ValueError(f"{f.where}.{name}: {value} is out of range")
    return value


def _recording_from_dict(data: object, where: str) -> Recording:
    f = Fields(data, where)
    prov = f.sub("provenance")
    repeats = f.get("repeats", list)
    if not repeats:
        raise ValueError(f"{where}.repeats: a recording holds at least one repeat")
    try:
        environment = Environment.from_dict(f.get("environment", dict))
    except TypeError as exc:
        raise ValueError(f"{where}.environment: {exc}") from None
    return Recording(
        provenance=Provenance(
            commit=prov.get("commit", str, optional=True),
            dirty=prov.get("dirty", bool, optional=True),
            date=prov.get("date", str),
            reason=prov.get("reason", str),
            perfgate_version=prov.get("perfgate_version", str),
            ci_run_id=prov.get("ci_run_id", str, optional=True),
            ci_run_url=prov.get("ci_run_url", str, optional=True),
        ),
        environment=environment,
        data=f.get("data", dict),
        peak_memory_kind=f.get("peak_memory_kind", str),
        repeats=tuple(_repeat_from_dict(r, f"{where}.repeats[{i}]") for i, r in enumerate(repeats)),
    )


def baseline_from_dict(data: object) -> Baseline:
    if not isinstance(data, dict):
        raise ValueError(f"expected a JSON object at the top level, got {type(data).__name__}")
    data = migrate(dict(data), BASELINE_KIND, BASELINE_SCHEMA_VERSION, BASELINE_MIGRATIONS)
    f = Fields(data, "")
    recordings = f.get("recordings", list)
    if not recordings:
        raise ValueError("recordings: a baseline holds at least one recording")
    return Baseline(
        workload=f.get("workload", str),
        workload_version=f.get("workload_version", int),
        device=f.get("device", str),
        environment_key=f.get("environment_key", str),
        params=f.get("params", dict),
        recordings=tuple(_recording_from_dict(r, f"recordings[{i}]") for i, r in enumerate(recordings)),
    )
