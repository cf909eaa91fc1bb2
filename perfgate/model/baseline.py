"""Baselines: what ``baselines/<env-key>/<workload>.json`` holds, committed and reviewed.

A baseline holds one or more *recordings* (one per ``rebaseline`` run, on different days
or CI jobs when made with ``--append``), so the day-to-day noise of the runner can be
estimated from the baseline itself. Each recording keeps, per repeat, the raw per-step
values (each series one line of space-separated milliseconds, so a baseline stays
reviewable in a pull request), the throughput and the peak memory, and beside them, for a
reader of the file, the time per step, the medians and the shares derived from the raw
values. On load they are derived again from the raw values, which are the data: a file
whose two disagree is refused. A repeat is the same :class:`~perfgate.model.repeat.Repeat`
a result holds, so both sides of a comparison derive their statistics by one rule.

Files are written atomically and only by ``rebaseline`` (``perfgate.store.baselines``);
reading never modifies them.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from statistics import median
from typing import Any

from perfgate.model.environment import Environment
from perfgate.model.repeat import PER_STEP, ROWS, STATISTICS, Repeat, describe_slowdown, row_means
from perfgate.model.result import environment_from_fields
from perfgate.model.schema import Fields, migrate, number_series
from perfgate.model.workload import PHASES

BASELINE_KIND = "perfgate.baseline"
BASELINE_SCHEMA_VERSION = 3
DEFAULT_MAX_RECORDINGS = 10
MIN_DAY_RUNS = 5
"""The fewest runs a measured day-to-day variation is taken from (4 df: as much as the
assumption it replaces is worth, :data:`~perfgate.analysis.stats.estimate.DEFAULT_DAY_PRIOR_DF`)."""
MAX_DAY_RUNS = 1000


def repeat_to_dict(repeat: Repeat) -> dict[str, Any]:
    """A baseline repeat as the file holds it: each raw series one line of space-separated
    milliseconds (a micro-benchmark's all-zero phases left out), and beside them, for a
    reader of the file, the time per step, medians and shares derived from exactly those."""
    phase_free = all(v == 0 for p in PHASES for v in repeat.phases_ms[p])
    return {
        **({"block": repeat.block} if repeat.block is not None else {}),
        **({"windows": repeat.windows} if repeat.windows > 1 else {}),
        "slowdown_reasons": list(repeat.slowdown_reasons) if repeat.slowdown_reasons is not None else None,
        "sm_clock_mhz": repeat.sm_clock_mhz,
        "power_cap_share": repeat.power_cap_share,
        "per_step_ms": dict(repeat.per_step_ms),
        "medians_ms": dict(repeat.medians_ms),
        "shares": dict(repeat.shares),
        "samples_per_s": repeat.samples_per_s,
        "peak_memory_bytes": repeat.peak_memory_bytes,
        "phases_ms": {k: " ".join(raw_text(v) for v in values) for k, values in repeat.phases_ms.items()
                      if not (phase_free and k in PHASES)},
    }


def as_stored(repeat: Repeat, index: int) -> Repeat:
    """``repeat`` as a baseline keeps it: its raw values at the file's nine digits, so that
    what is written is what a reader derives again, and only the facts a comparison uses."""
    return Repeat(
        phases_ms={k: tuple(float(raw_text(v)) for v in values) for k, values in repeat.phases_ms.items()},
        samples_per_s=repeat.samples_per_s, peak_memory_bytes=repeat.peak_memory_bytes, index=index,
        block=repeat.block, slowdown_reasons=repeat.slowdown_reasons, sm_clock_mhz=repeat.sm_clock_mhz,
        power_cap_share=repeat.power_cap_share, windows=repeat.windows,
    )


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
    repeats: tuple[Repeat, ...]

    def values(self, row: str, statistic: str = PER_STEP) -> list[float]:
        """Each repeat's summary of ``row`` under ``statistic``."""
        return [r.summary_ms(statistic)[row] for r in self.repeats]

    def to_dict(self) -> dict[str, Any]:
        return {
            "provenance": self.provenance.to_dict(),
            "environment": self.environment.to_dict(),
            "data": dict(self.data),
            "peak_memory_kind": self.peak_memory_kind,
            "repeats": [repeat_to_dict(r) for r in self.repeats],
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
class DayVariation:
    """This runner's job-to-job variation of a workload, measured from its history store
    (``perfgate rebaseline --day-history``) and recorded with the baseline.

    ``sd_log`` holds, per statistic (``per_step``, ``median``), the sd over ``runs`` runs of
    each run's mean log step summary: the spread of one job's result around another's, day
    effect and repeat noise together, so an upper bound of the day term. ``runs - 1`` is its
    degrees of freedom. The gate uses it for the time per step instead of the assumed day sd
    (``assumed_day_sd_log``, worth ``day_prior_df``)."""

    sd_log: Mapping[str, float]
    runs: int
    first_date: str
    last_date: str
    source: str
    """Where it was measured, for the reader (the store's file name or masked URL)."""

    @property
    def df(self) -> int:
        return self.runs - 1

    def to_dict(self) -> dict[str, Any]:
        return {"sd_log": dict(self.sd_log), "runs": self.runs, "first_date": self.first_date,
                "last_date": self.last_date, "source": self.source}


def day_variation_from_dict(data: object, where: str) -> DayVariation:
    f = Fields(data, where)
    by_statistic = f.sub("sd_log")
    if not by_statistic.data:
        raise ValueError(f"{where}.sd_log: names no statistic")
    sd: dict[str, float] = {}
    for name in by_statistic.data:
        if name not in STATISTICS:
            raise ValueError(f"{where}.sd_log: unknown statistic {name!r}; statistics: {', '.join(STATISTICS)}")
        value = by_statistic.number(name, low=0.0, high=1.0)
        assert value is not None
        sd[name] = value
    runs = f.integer("runs", low=MIN_DAY_RUNS, high=MAX_DAY_RUNS)
    assert runs is not None
    texts = {k: f.get(k, str) for k in ("first_date", "last_date", "source")}
    for k in ("first_date", "last_date"):  # shown in the pull request's comment: a date or nothing
        if not (texts[k] == "unknown" or re.fullmatch(r"\d{4}-\d{2}-\d{2}", texts[k])):
            raise ValueError(f"{where}.{k}: expected a date YYYY-MM-DD or 'unknown', got {texts[k][:40]!r}")
    if len(texts["source"]) > 200 or not texts["source"].isprintable():
        raise ValueError(f"{where}.source: not a short printable text")
    return DayVariation(sd, runs, texts["first_date"], texts["last_date"], texts["source"])


@dataclass(frozen=True)
class Baseline:
    workload: str
    workload_version: int
    device: str
    environment_key: str
    params: Mapping[str, Any]
    recordings: tuple[Recording, ...]
    day_variation: DayVariation | None = None
    """The runner's measured job-to-job variation (None: the gate assumes one)."""

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
            "day_variation": None if self.day_variation is None else self.day_variation.to_dict(),
        }

    def recording_values(self, row: str, statistic: str = PER_STEP) -> list[list[float]]:
        """Per recording, each repeat's summary of ``row`` under ``statistic``."""
        return [rec.values(row, statistic) for rec in self.recordings]

    def without_throttled(self) -> tuple[Baseline, LeftOut]:
        """The baseline less its throttled repeats, and what was left out, for the report.

        A repeat is throttled when the GPU slowed down for heat or by hardware while it was
        recorded (:attr:`Repeat.throttle_reason`); the messages name the reason.

        A recording left empty is dropped. So is one left with a single repeat, when a
        recording of two or more remains: one repeat shows no run-to-run variation, the
        statistics refuse it, and keeping it would turn the whole workload into an ERROR
        that the other recordings can avoid. When none of two or more remains, the
        single repeats are kept so that the refusal says why.
        """
        kept = [tuple(r for r in rec.repeats if r.throttle_reason is None) for rec in self.recordings]
        throttled = sum(len(rec.repeats) - len(k) for rec, k in zip(self.recordings, kept, strict=True))
        why: dict[str, int] = {}
        for rec in self.recordings:
            for r in rec.repeats:
                if r.throttle_reason is not None:
                    why[r.throttle_reason] = why.get(r.throttle_reason, 0) + 1
        usable = any(len(k) >= 2 for k in kept)
        recordings = []
        short: list[int] = []
        for j, (rec, repeats) in enumerate(zip(self.recordings, kept, strict=True)):
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
"""How far a stored median or time per step may lie from the one derived from the stored raw
values. Raw values are written to nine significant digits; files from before were written
to 0.001 ms, by which a residual (the step less five phases) can move by 0.003 ms."""


def raw_text(value: float) -> str:
    """A raw per-step value as the file holds it: nine significant digits, enough that the
    summaries derived from the file are those of the measured values (a micro-benchmark's
    step can be a few microseconds)."""
    return f"{value:.9g}"
SHARE_TOLERANCE = 0.001


def stored_series(raw: Mapping[str, tuple[float, ...]], where: str) -> dict[str, tuple[float, ...]]:
    """A baseline repeat's series in memory: a repeat stored without phase series (a
    micro-benchmark) has zero phases; one with some phases must have all five."""
    if "step" not in raw:
        raise ValueError(f"{where}: no step series")
    step = raw["step"]
    present = [p for p in PHASES if p in raw]
    if present and len(present) != len(PHASES):
        missing = ", ".join(p for p in PHASES if p not in raw)
        raise ValueError(f"{where}: raw values of some phases but not of {missing}")
    if any(len(v) != len(step) for v in raw.values()):
        raise ValueError(f"{where}: the raw series differ in length")
    if sum(step) <= 0:
        raise ValueError(f"{where}.step: the steps add up to no time")
    series = dict(raw)
    if not present:
        series.update({p: (0.0,) * len(step) for p in PHASES})
    return series


_DERIVED = (("per_step_ms", PER_STEP, "time per step"), ("medians_ms", "median", "median"))
assert {statistic for _, statistic, _ in _DERIVED} == set(STATISTICS)


def _repeat_from_dict(data: object, where: str, index: int) -> Repeat:
    f = Fields(data, where)
    raw = f.sub("phases_ms")
    series = stored_series({k: _raw_series(v, f"{raw.where}.{k}") for k, v in raw.data.items()}, raw.where)
    windows = f.get("windows", int, optional=True) or 1
    if isinstance(windows, bool) or windows < 1 or len(series["step"]) % windows:
        raise ValueError(f"{where}.windows: {windows!r} is not a count of equal windows of its "
                         f"{len(series['step'])} steps")
    repeat = Repeat(phases_ms=series, samples_per_s=1.0, peak_memory_bytes=None, windows=windows)
    # The raw values are the data; the stored summaries only repeat them for a reader of
    # the file. A file whose two disagree was edited: refused, never guessed.
    for key, statistic, words in _DERIVED:
        stored = f.sub(key)
        derived = repeat.summary_ms(statistic)
        for row in ROWS:
            value = stored.number(row)
            assert value is not None
            if row != "residual" and value < 0:
                raise ValueError(f"{stored.where}.{row}: negative duration {value}")
            if abs(derived[row] - value) > MEDIAN_TOLERANCE_MS + 1e-6 * abs(value):
                raise ValueError(f"{stored.where}.{row}: {value} is not the {words} of the raw values "
                                 f"({derived[row]:.4f})")
    shares = f.sub("shares")
    for row in ROWS:
        value = shares.number(row)
        assert value is not None
        if abs(repeat.shares[row] - value) > SHARE_TOLERANCE:
            raise ValueError(f"{shares.where}.{row}: {value} is not the share the raw values give "
                             f"({repeat.shares[row]:.4f})")
    peak = f.get("peak_memory_bytes", int, optional=True)
    if peak is not None and peak < 0:
        raise ValueError(f"{where}.peak_memory_bytes: negative peak memory {peak}")
    return Repeat(
        phases_ms=series,
        samples_per_s=f.number("samples_per_s", positive=True),  # type: ignore[arg-type]  # required: never None
        peak_memory_bytes=peak,
        index=index,
        block=f.get("block", int, optional=True),
        slowdown_reasons=_slowdown_reasons(f, where),
        sm_clock_mhz=_optional_number(f, "sm_clock_mhz", upper=None),
        power_cap_share=_optional_number(f, "power_cap_share", upper=1.0),
        windows=windows,
    )


def _slowdown_reasons(f: Fields, where: str) -> tuple[str, ...] | None:
    """``null`` in the file: the repeat was marked throttled without a reason (left out)."""
    if "slowdown_reasons" not in f.data:
        raise ValueError(f"missing field {where}.slowdown_reasons")
    data = f.get("slowdown_reasons", list, optional=True)
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
        environment = environment_from_fields(f.sub("environment"))
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
        repeats=tuple(_repeat_from_dict(r, f"{where}.repeats[{i}]", i) for i, r in enumerate(repeats)),
    )


def _repeat_v1_to_v2(repeat: object) -> object:
    """Schema 1 kept the raw values as ``raw_ms`` and a ``throttled`` flag beside the reasons;
    schema 2 keeps them as ``phases_ms``, as results do, the reasons alone (``null``: throttled,
    reason not recorded) and the time per step beside the medians. Anything it cannot read
    is left for the reader to refuse with its path."""
    if not isinstance(repeat, dict) or "raw_ms" not in repeat:
        return repeat
    out = {k: v for k, v in repeat.items() if k not in ("raw_ms", "throttled")}
    out["phases_ms"] = repeat["raw_ms"]
    reasons = repeat.get("slowdown_reasons")
    if not isinstance(reasons, list):
        reasons = None if repeat.get("throttled") is True else []
    out["slowdown_reasons"] = reasons
    try:
        raw = {k: tuple(float(x) for x in v.split()) for k, v in repeat["raw_ms"].items()}
        out["per_step_ms"] = row_means(stored_series(raw, ""))
    except (AttributeError, TypeError, ValueError, KeyError, ZeroDivisionError, OverflowError):
        pass  # not readable: the reader names what is wrong with the raw values
    return out


def _v1_to_v2(data: dict[str, Any]) -> dict[str, Any]:
    recordings = data.get("recordings")
    if not isinstance(recordings, list):
        return data
    upgraded = []
    for rec in recordings:
        if isinstance(rec, dict) and isinstance(rec.get("repeats"), list):
            rec = {**rec, "repeats": [_repeat_v1_to_v2(r) for r in rec["repeats"]]}
        upgraded.append(rec)
    return {**data, "recordings": upgraded}


def _v2_to_v3(data: dict[str, Any]) -> dict[str, Any]:
    """Schema 3 adds ``day_variation`` (null: none measured, the gate assumes one)."""
    return {**data, "day_variation": None}


BASELINE_MIGRATIONS: dict[int, Any] = {1: _v1_to_v2, 2: _v2_to_v3}
"""Each migration takes a document of version N and returns one of version N + 1 (in memory;
the file is never rewritten by reading it)."""


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
        day_variation=(None if (day := f.get("day_variation", dict, optional=True)) is None
                       else day_variation_from_dict(day, "day_variation")),
    )
