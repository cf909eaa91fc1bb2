"""Run results: the raw per-step measurements of every repeat, schema-versioned.

A result file holds one workload measured on one device: the resolved parameters, the
overrides the user gave, the environment fingerprint, where the data came from, and for
every repeat every raw per-step phase value. Summaries are derived from these values by
``perfgate.analysis.summary``; they are never stored instead of them.

:func:`result_from_dict` checks every field it keeps and every setting a report or label
reads (``torch_settings["synchronizes"]``, the loader settings), and bounds the numbers
(``perfgate.model.schema``; here the indices, blocks, window and throughput), so that a
file a pull request's code wrote is a result the comparison can take or one ValueError
line naming the bad value's path. Telemetry stays free-form and is read leniently.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from perfgate.model.benchmark import KIND as BENCHMARK_KIND
from perfgate.model.environment import Environment
# RESIDUAL and ROWS: re-exported, the reports and the history read them from here.
from perfgate.model.repeat import RESIDUAL as RESIDUAL
from perfgate.model.repeat import ROWS as ROWS
from perfgate.model.repeat import (
    SERIES,
    SLOWDOWN_REASONS,
    Repeat,
    check_series,
)
from perfgate.model.schema import MAX_COUNT, MAX_DURATION, MIN_DURATION, Fields, migrate, number_series
from perfgate.model.script import script_path_of

RESULT_KIND = "perfgate.run-result"
RESULT_SCHEMA_VERSION = 3
"""2: a repeat no longer records ``first_loss``/``last_loss`` (never read; the window's losses
are checked for non-finite values where they are measured). 3: every repeat records how its
process started (``torch_settings["process_start"]``, :data:`PROCESS_STARTS`): the judge checks
it against the base's ``start``, and a repeat that leaves it out must not skip that check."""

PROCESS_STARTS = ("fork", "fresh")
"""How a repeat's process started (``torch_settings["process_start"]``): forked from a template
or a new interpreter (``perfgate.measure.template.process_start``)."""


CLOCK_EVENT_REASONS: Mapping[int, str] = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
"""NVML's clock-event reasons (nvmlClocksEventReason*, formerly nvmlClocksThrottleReason*),
by bit: the one table for the telemetry and the doctor."""
def _gpu_telemetry(telemetry: Mapping[str, Any] | None) -> Mapping[str, Any]:
    gpu = (telemetry or {}).get("gpu") if isinstance(telemetry, Mapping) else None
    return gpu if isinstance(gpu, Mapping) else {}


def _positive(value: object, *, zero: bool = False) -> float | None:
    number = finite_number(value)
    if number is None:
        return None
    return number if number > 0 or (zero and number == 0) else None


def slowdown_reasons(gpu: Mapping[str, Any]) -> tuple[str, ...] | None:
    """The thermal and hardware slowdown reasons in one repeat's GPU telemetry.

    ``()`` when there were none, or nothing was sampled; ``None`` when the repeat is marked
    throttled but the reason was not recorded. Telemetry written since the power cap stopped
    counting holds ``slowdown_reasons``. Older telemetry holds ``throttle_reasons`` (every
    reason seen, the power cap included) and ``throttled``: its slowdown reasons are read
    from that list, so a repeat that only hit the power cap is kept. A repeat marked
    ``throttled: true`` without any reason is left out, as it was when it was recorded:
    the reason may have been a slowdown, and nothing tells.
    """
    recorded = gpu.get("slowdown_reasons")
    if isinstance(recorded, list):
        return tuple(sorted({x for x in recorded if isinstance(x, str)}))
    legacy = gpu.get("throttle_reasons")
    if isinstance(legacy, list) and legacy:
        return tuple(sorted({x for x in legacy if x in SLOWDOWN_REASONS}))
    return None if gpu.get("throttled") is True else ()


def machine_telemetry(telemetry: Mapping[str, Any] | None) -> Mapping[str, Any]:
    if not isinstance(telemetry, Mapping):
        return {}
    machine = telemetry.get("machine")
    return machine if isinstance(machine, Mapping) else {}


def finite_number(value: object) -> float | None:
    """``value`` as a finite float; None when it is not a number or not one a float holds
    (telemetry is read leniently: a value it cannot use is not known)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:  # an integer beyond a float's range
        return None
    return number if math.isfinite(number) else None


def other_cpu_share(telemetry: Mapping[str, Any] | None) -> float | None:
    """Median share of the CPUs other processes used during the window; None: not known."""
    stats = machine_telemetry(telemetry).get("other_cpu_share")
    return finite_number(stats.get("median")) if isinstance(stats, Mapping) else None


def other_gpu_processes(telemetry: Mapping[str, Any] | None) -> int | None:
    """How many other processes NVML listed on the GPU during the window; None: not known."""
    stats = machine_telemetry(telemetry).get("other_gpu_processes")
    count = stats.get("count") if isinstance(stats, Mapping) else None
    return count if isinstance(count, int) and not isinstance(count, bool) and count >= 0 else None


@dataclass(frozen=True, kw_only=True)
class RepeatResult(Repeat):
    """One repeat of a run: one fresh process, a warmup, then a synchronised window of N steps.

    The :class:`~perfgate.model.repeat.Repeat` a comparison uses, and what else the run
    recorded. Its GPU facts (slowdown reasons, SM clock, power-cap share) are read from its
    telemetry, never given apart from it."""

    started_at: str
    timing: str
    """``"perf_counter"`` (CPU) or ``"cuda_events"`` (device phases from CUDA events)."""
    window_s: float
    """Wall time of the measured window, between the two synchronisations."""
    peak_memory_kind: str
    torch_settings: Mapping[str, Any]
    loader_settings: Mapping[str, Any]
    loader_restarts: int = 0
    """Times the DataLoader ran out inside the window and was restarted (0 when pinned right)."""
    telemetry: Mapping[str, Any] | None = None
    """Summary of the background samples taken during the window (None: not sampled)."""
    ranks: tuple[Mapping[str, tuple[float, ...]], ...] = ()
    """A distributed repeat (``nproc_per_node`` > 1): every rank's own per-step series, by rank
    (``comm``: per step, the time backward waited for the all-reduce at its end; on the CPU
    also ``comm_total``, the time any all-reduce bucket was in flight). ``phases_ms`` then
    holds, per step, the series of the rank whose step was the slowest. Empty otherwise."""
    slowdown_reasons: tuple[str, ...] | None = field(init=False, default=())
    sm_clock_mhz: float | None = field(init=False, default=None)
    power_cap_share: float | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        super().__post_init__()
        gpu = _gpu_telemetry(self.telemetry)
        clock = gpu.get("sm_clock_mhz")
        share = _positive(gpu.get("power_cap_share"), zero=True)
        object.__setattr__(self, "slowdown_reasons", slowdown_reasons(gpu))
        object.__setattr__(self, "sm_clock_mhz",
                           _positive(clock.get("median") if isinstance(clock, Mapping) else None))
        object.__setattr__(self, "power_cap_share", share if share is None or share <= 1 else None)

    @property
    def other_cpu_share(self) -> float | None:
        """Median share of the CPUs other processes used during the window (None: not known)."""
        return other_cpu_share(self.telemetry)

    @property
    def device_busy_fraction(self) -> float | None:
        """The share of the window the device was busy (CUDA runs; None elsewhere)."""
        busy = self.phases_ms.get("device_busy")
        return sum(busy) / (self.window_s * 1e3) if busy else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "started_at": self.started_at,
            "timing": self.timing,
            "window_s": self.window_s,
            "phases_ms": {k: list(v) for k, v in self.phases_ms.items()},
            "samples_per_s": self.samples_per_s,
            "peak_memory_bytes": self.peak_memory_bytes,
            "peak_memory_kind": self.peak_memory_kind,
            "torch_settings": dict(self.torch_settings),
            "loader_settings": dict(self.loader_settings),
            "loader_restarts": self.loader_restarts,
            "telemetry": dict(self.telemetry) if self.telemetry is not None else None,
            **({"block": self.block} if self.block is not None else {}),
            **({"windows": self.windows} if self.windows > 1 else {}),
            **({"ranks": [{k: list(v) for k, v in r.items()} for r in self.ranks]} if self.ranks else {}),
        }


@dataclass(frozen=True)
class RunResult:
    workload: str
    workload_version: int
    workload_source: str
    device: str
    params: Mapping[str, Any]
    overrides: Mapping[str, Any]
    environment: Environment
    data: Mapping[str, Any]
    created_at: str
    perfgate_version: str
    repeats: tuple[RepeatResult, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": RESULT_KIND,
            "schema_version": RESULT_SCHEMA_VERSION,
            "perfgate_version": self.perfgate_version,
            "workload": self.workload,
            "workload_version": self.workload_version,
            "workload_source": self.workload_source,
            "device": self.device,
            "params": dict(self.params),
            "overrides": dict(self.overrides),
            "environment": self.environment.to_dict(),
            "data": dict(self.data),
            "created_at": self.created_at,
            "repeats": [r.to_dict() for r in self.repeats],
        }


def window_steps_problem(result: RunResult, side: str) -> str | None:
    """Why the ``side`` result's repeats do not time windows of the workload's ``steps`` (its
    ``params["steps"]``: ``Params.steps`` after the device profile and any override, what
    every window of a repeat measures), naming both numbers; None when each does.

    A repeat's series hold its windows one after the other; how many windows it says they are
    is a label on the same steps. Twelve steps of a workload of 4 told as 6 windows of 2 would
    summarise each pair of steps by its median, which a stall every fourth step never reaches:
    the windows a result holds must be of the steps its workload measures."""
    steps = result.params.get("steps")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        shown = repr(steps)[:40]
        return (f"steps per window: the {side} side's result records no workload steps (params.steps is "
                f"{shown}), so its windows cannot be checked against them")
    for repeat in result.repeats:
        if repeat.steps_per_window != steps:
            return (f"steps per window: the workload's steps give {steps}, the {side} side's repeat {repeat.index + 1} "
                    f"holds {repeat.windows} window(s) of {repeat.steps_per_window}")
    return None


MAX_REPEATS = 10**6
"""Repeat indices and ABBA block numbers are below this (a run holds tens of repeats)."""
MAX_WINDOW_S = 1e7
"""The longest measured window, in seconds (116 days); the shortest is :data:`MIN_DURATION` ms."""
MAX_SAMPLES_PER_S = 1e12
"""The highest throughput a repeat can report; the lowest is one sample in 1e9 s (31 years)."""

LOADER_SETTING_KINDS: Mapping[str, type] = {
    "batch_size": int, "num_workers": int, "prefetch_factor": int, "num_batches": int,
    "pin_memory": bool, "persistent_workers": bool, "drop_last": bool,
}
"""The DataLoader settings a repeat records (``perfgate.measure.loop``) and their types;
each may be null (a loader without it). The reports and labels read them."""


def _strings(values: object, where: str) -> list[str]:
    if not isinstance(values, list):
        raise ValueError(f"{where}: expected a list of strings, got {type(values).__name__}")
    for i, value in enumerate(values):
        if not isinstance(value, str):
            raise ValueError(f"{where}[{i}]: expected a string, got {type(value).__name__}")
    return values


CLAMP_NOTE_MS = 0.005
"""A CUDA event stamp raised to the one before it by more than this (5 µs, ten times the
events' resolution) is not resolution: the result records each window's count of raised
stamps and the largest raise (``torch_settings.cuda_window.clamped_stamps``,
``largest_clamp_ms``), and the diagnosis names larger raises (CLOCK-MISMATCH)."""


# The synchronisations a step can make that ``torch_settings["synchronizes"]`` names (the
# measuring side detects them; the diagnosis advises on them).
GRAD_SCALER_SYNC = "GradScaler.step (one per step)"
"""fp16 with an optimizer that cannot take the scaler's inf check on the device:
``GradScaler.step`` reads it with ``.item()`` before every step (a repeat's
``torch_settings["synchronizes"]`` names it so)."""

BLOCKING_COPY_SYNC = "blocking host-to-device copy (one per copied tensor per step)"
"""Batches copied from pageable host memory (``pin_memory=false``): each copy blocks the host
until the device has run everything queued before it."""


def _torch_settings(f: Fields) -> dict[str, Any]:
    """``torch_settings``: free-form, but the values that are read are checked: the
    synchronisations a step makes (a list of strings) and the CUDA window's facts."""
    settings = f.sub("torch_settings")
    synchronizes = settings.get("synchronizes", list, optional=True)
    if synchronizes is not None:
        _strings(synchronizes, f"{settings.where}.synchronizes")
    if settings.get("cuda_window", dict, optional=True) is not None:
        window = settings.sub("cuda_window")
        window.number("device_steps_over_window", optional=True, low=0.0)
        window.integer("max_memory_reserved_bytes", optional=True, low=0, high=MAX_COUNT)
        counts = _counts(window.get("clamped_stamps", list, optional=True), f"{window.where}.clamped_stamps")
        raises = window.get("largest_clamp_ms", list, optional=True)
        if raises is not None:
            for i, value in enumerate(raises):
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= MAX_DURATION:
                    raise ValueError(f"{window.where}.largest_clamp_ms[{i}]: expected a number from 0 to {MAX_DURATION}")
            if counts is None or len(raises) != len(counts):
                raise ValueError(f"{window.where}.largest_clamp_ms: expected one value per window of clamped_stamps")
    if settings.get("script", dict, optional=True) is not None:
        settings.sub("script").integer("scaler_skipped_steps", optional=True, low=0, high=MAX_COUNT)
    start = settings.get("process_start", str, optional=True)
    if start is not None and start not in PROCESS_STARTS:
        raise ValueError(f"{settings.where}.process_start: expected one of {', '.join(PROCESS_STARTS)}, "
                         f"got {start[:40]!r}")
    return settings.data


def _counts(values: list[Any] | None, where: str) -> list[int] | None:
    """A recorded list of counts (one per window), each an integer from 0 to MAX_COUNT."""
    if values is None:
        return None
    for i, value in enumerate(values):
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_COUNT:
            raise ValueError(f"{where}[{i}]: expected an integer from 0 to {MAX_COUNT}")
    return values


def _loader_settings(f: Fields) -> dict[str, Any]:
    """``loader_settings``: each setting of :data:`LOADER_SETTING_KINDS` of its type (or
    null), counts from 0 to :data:`~perfgate.model.schema.MAX_COUNT`; others are kept as written."""
    settings = f.sub("loader_settings")
    for key, kind in LOADER_SETTING_KINDS.items():
        if kind is int:
            settings.integer(key, optional=True, low=0, high=MAX_COUNT)
        else:
            settings.get(key, kind, optional=True)
    return settings.data


def repeat_from_dict(data: object, where: str) -> RepeatResult:
    """One repeat of a result file, every field checked and bounded; ValueError naming
    the path of the first bad value (``repeats[2].phases_ms.step[3]: ...``)."""
    f = Fields(data, where)
    phases = f.sub("phases_ms")
    series: dict[str, tuple[float, ...]] = {}
    for name in SERIES:
        series[name] = number_series(phases.get(name, list), f"{phases.where}.{name}")
    for name, values in phases.data.items():
        if name not in series:
            series[name] = number_series(values, f"{phases.where}.{name}")
    check_series(series, phases.where)
    lengths = {len(v) for v in series.values()}
    peak = f.integer("peak_memory_bytes", optional=True, low=0, high=MAX_COUNT)
    ranks = []
    for i, rank in enumerate(f.get("ranks", list, optional=True) or []):
        where_rank = f"{f.where}.ranks[{i}]"
        rank_fields = Fields(rank, where_rank)
        rank_series = {name: number_series(values, f"{where_rank}.{name}") for name, values in rank_fields.data.items()}
        missing = [name for name in SERIES if name not in rank_series]
        if missing:
            raise ValueError(f"{where_rank}: missing series {', '.join(missing)}")
        if {len(v) for v in rank_series.values()} != lengths:
            raise ValueError(f"{where_rank}: series lengths differ from the repeat's ({sorted(lengths)[0]} steps)")
        ranks.append(rank_series)
    if len(ranks) == 1:
        raise ValueError(f"{f.where}.ranks: a distributed repeat holds at least two ranks")
    return RepeatResult(
        index=f.integer("index", low=0, high=MAX_REPEATS - 1),  # type: ignore[arg-type]  # required: never None
        started_at=f.get("started_at", str),
        timing=f.get("timing", str),
        window_s=f.number("window_s", positive=True, low=MIN_DURATION / 1e3,  # type: ignore[arg-type]  # required: never None
                          high=MAX_WINDOW_S),
        phases_ms=series,
        samples_per_s=f.number("samples_per_s", positive=True, low=1e-9,  # type: ignore[arg-type]  # required: never None
                               high=MAX_SAMPLES_PER_S),
        peak_memory_bytes=peak,
        peak_memory_kind=f.get("peak_memory_kind", str),
        torch_settings=_torch_settings(f),
        loader_settings=_loader_settings(f),
        loader_restarts=f.integer("loader_restarts", optional=True, low=0, high=MAX_COUNT) or 0,
        telemetry=f.get("telemetry", dict, optional=True),
        block=f.integer("block", optional=True, low=0, high=MAX_REPEATS - 1),
        ranks=tuple(ranks),
        windows=_windows(f, lengths),
    )


def _windows(f: Fields, lengths: set[int]) -> int:
    """``windows`` (absent: 1), a divisor of the repeat's steps."""
    windows = f.integer("windows", optional=True, low=1, high=MAX_COUNT) or 1
    steps = next(iter(lengths))
    if steps % windows:
        raise ValueError(f"{f.where}.windows: {steps} steps do not divide into {windows} windows of equal steps")
    return windows


def environment_from_fields(env: Fields) -> Environment:
    """The environment fingerprint, each field of the type :class:`Environment` declares
    (a string, an integer, a boolean, or null where it may be None); unknown keys (the
    stored ``key``) are left out."""
    hints = typing.get_type_hints(Environment)
    values: dict[str, Any] = {}
    for item in dataclasses.fields(Environment):
        hint = hints[item.name]
        kinds = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
        optional = type(None) in kinds or item.default is not dataclasses.MISSING
        kinds = tuple(k for k in kinds if k is not type(None))
        value = env.get(item.name, kinds, optional=optional)
        if item.name in env.data:
            values[item.name] = value
    return Environment(**values)


# Each migration takes a document of version N and returns one of version N + 1.
def _without_losses(data: dict[str, Any]) -> dict[str, Any]:
    """Schema 1 → 2: each repeat's ``first_loss`` and ``last_loss`` dropped (never read).
    Anything that is not the expected shape is left for the reader to name."""
    repeats = data.get("repeats")
    if isinstance(repeats, list):
        data["repeats"] = [{k: v for k, v in r.items() if k not in ("first_loss", "last_loss")}
                           if isinstance(r, dict) else r for r in repeats]
    return data


def _starts_known(data: dict[str, Any]) -> dict[str, Any]:
    """Schema 2 → 3: every repeat records ``torch_settings["process_start"]``. A repeat of an
    older file that does not is given the start it can only have had: ``fresh`` for a script's
    (a script runs as ``__main__``, never forked from a template) and for a distributed
    workload's (``nproc_per_node`` > 1: its ranks are started by torch.distributed's launcher).
    Any other repeat may have been forked or not, and nothing in the file tells: the file is
    refused, naming the repeat. Anything that is not the expected shape is left for the reader
    to name."""
    repeats = data.get("repeats")
    if not isinstance(repeats, list):
        return data
    source = data.get("workload_source")
    params = data.get("params")
    nproc = params.get("nproc_per_node") if isinstance(params, dict) else None
    if isinstance(source, str) and script_path_of(source) is not None:
        known: str | None = "fresh"
    elif isinstance(nproc, int) and not isinstance(nproc, bool) and nproc > 1:
        known = "fresh"
    else:
        known = None
    for i, r in enumerate(repeats):
        settings = r.get("torch_settings") if isinstance(r, dict) else None
        if not isinstance(settings, dict) or "process_start" in settings:
            continue
        if known is None:
            raise ValueError(f"repeats[{i}].torch_settings: no process_start (fork or fresh), which the judge "
                             "checks against the base's start; this result was written before every repeat "
                             "recorded it, and nothing in it tells how the process started: measure it again")
        r["torch_settings"] = {**settings, "process_start": known}
    return data


RESULT_MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {1: _without_losses, 2: _starts_known}


def result_from_dict(data: object) -> RunResult:
    """A result file's document as a :class:`RunResult`, every field checked (see
    :func:`repeat_from_dict`); ValueError naming the path of the first bad value."""
    if not isinstance(data, dict):
        raise ValueError(f"expected a JSON object at the top level, got {type(data).__name__}")
    data = migrate(dict(data), RESULT_KIND, RESULT_SCHEMA_VERSION, RESULT_MIGRATIONS)
    f = Fields(data, "")
    environment = environment_from_fields(f.sub("environment"))
    repeats = f.get("repeats", list)
    if not repeats:
        raise ValueError("repeats: a result holds at least one repeat")
    read = tuple(repeat_from_dict(r, f"repeats[{i}]") for i, r in enumerate(repeats))
    data_kind = data.get("data", {}).get("kind") if isinstance(data.get("data"), dict) else None
    if data_kind != BENCHMARK_KIND:  # a pytest-benchmark run's rounds are no process perfgate started
        for i, r in enumerate(read):
            if "process_start" not in r.torch_settings:
                raise ValueError(f"repeats[{i}].torch_settings: missing process_start (fork or fresh): every "
                                 f"repeat of a schema {RESULT_SCHEMA_VERSION} result records how its process "
                                 "started, and the judge checks it against the base's start")
    return RunResult(
        workload=f.get("workload", str),
        workload_version=f.integer("workload_version", low=0, high=MAX_COUNT),  # type: ignore[arg-type]  # required: never None
        workload_source=f.get("workload_source", str),
        device=f.get("device", str),
        params=f.get("params", dict),
        overrides=f.get("overrides", dict),
        environment=environment,
        data=f.get("data", dict),
        created_at=f.get("created_at", str),
        perfgate_version=f.get("perfgate_version", str),
        repeats=read,
    )


def merge_repeats(results: Sequence[RunResult]) -> RunResult:
    """One result holding the repeats of several runs of the same workload (a second look)."""
    first = results[0]
    repeats: list[RepeatResult] = []
    for r in results:
        for rep in r.repeats:
            repeats.append(dataclasses.replace(rep, index=len(repeats)))
    return dataclasses.replace(first, repeats=tuple(repeats))
