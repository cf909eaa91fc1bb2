"""The workload API: what a benchmarked training step is made of.

A workload is a name, a version, pinned parameters with per-device profiles, and a
builder that returns the model, the optimizer, the loss function and the DataLoader. This
module defines the nouns only; it does not import torch, so listing and comparing stay
fast. The reference workloads in ``workloads/`` are written with exactly this API.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from perfgate.model.errors import UsageError

Scalar = bool | int | float | str

PRECISIONS = ("fp32", "bf16", "fp16")
MEMORY_FORMATS = ("contiguous", "channels_last")
DEVICES = ("cpu", "cuda")
@dataclass(frozen=True)
class Phase:
    """One timed phase of a step: a row of :data:`PHASE_TABLE`.

    Adding a phase is a row here, the code that switches into it (the workload's step in
    ``perfgate.measure.loop``, the script hooks), and the stored formats' migrations; the
    timelines, the results, the diagnosis, the tables, the counters and the traces follow
    this table.
    """

    name: str
    """The series' key in results and baselines, the trace's ``record_function`` range."""
    words: str
    """How a sentence of the diagnosis names it ("the data wait")."""
    header: str
    """Its column in the per-rank table."""
    host: bool = False
    """Works on host tensors on every device: timed on the host clock beside the device's
    events; its aten calls launch no kernels and wait for no device."""
    compute: bool = False
    """Counted in the compute share (COMPUTE-BOUND: forward + backward + optimizer)."""


PHASE_TABLE = (
    Phase("data_wait", "the data wait", "data_wait", host=True),
    Phase("h2d", "host-to-device copies", "h2d"),
    Phase("forward", "forward", "forward", compute=True),
    Phase("backward", "backward", "backward", compute=True),
    Phase("optimizer", "the optimizer step", "optimizer", compute=True),
)
"""The timed phases of a step, in the order a step runs them; a phase's index here is its
slot in the timelines (``perfgate.measure.timeline``)."""
PHASES = tuple(p.name for p in PHASE_TABLE)
"""The phases' names, in order: the one list every part of perfgate follows; ``step`` is
the time boundary to boundary (on CUDA between the steps' boundary events, on the device)."""
PHASE_WORDS = MappingProxyType({p.name: p.words for p in PHASE_TABLE})
HOST_PHASES = frozenset(p.name for p in PHASE_TABLE if p.host)
"""Phases that work on host tensors on every device."""
COMPUTE_PHASES = tuple(p.name for p in PHASE_TABLE if p.compute)

DEFAULT_WARMUP_STEPS = 10
"""Warmup steps when a workload does not say: enough on CUDA for cuDNN's autotuning, the
caching allocator and lazily loaded kernels to settle before the window (as for a script)."""
DEFAULT_STEPS = 50
"""Measured steps per repeat when a workload does not say (as for a script)."""

_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _check_int(name: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


def _check_bool(name: str, value: object) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be true or false, got {value!r}")


def _check_choice(name: str, value: object, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(choices)}, got {value!r}")


@dataclass(frozen=True)
class Params:
    """Pinned parameters of one workload on one device.

    Every field changes speed, so every field is recorded in the result and must match
    the baseline's before two runs are compared. ``extra`` holds the workload's own
    knobs (a learning rate, a per-sample delay); they are set with ``--set`` like the
    others and typed by their default value.

    Only ``batch_size`` has no default: it sets how much work a step is and how much memory
    it takes, which no default could guess. Everything else defaults to what a plain
    training loop does (fp32, contiguous, the loader in the main process, torch's own
    switches), so a workload states only what it changes; a default is recorded like a
    value set by hand, and changing a default here would make results incomparable, so
    the defaults never change.
    """

    batch_size: int
    input_size: int | None = None
    """The workload's own size knob (an image side, a feature count), for its builder to
    read; perfgate records it, prints it and compares it like any parameter, and never reads
    it itself. None: the workload has none (then it is left out of the result)."""
    warmup_steps: int = DEFAULT_WARMUP_STEPS
    steps: int = DEFAULT_STEPS
    seed: int = 0
    precision: str = "fp32"
    memory_format: str = "contiguous"
    num_workers: int = 0
    pin_memory: bool = False
    prefetch_factor: int | None = None
    persistent_workers: bool = False
    cudnn_benchmark: bool = False
    deterministic: bool = False
    allow_tf32: bool = False
    num_threads: int = 0
    """Intra-op threads; 0 means one per core available to the process (recorded as used)."""
    nproc_per_node: int = 1
    """Processes (ranks) per repeat: above 1 each repeat runs through ``torch.distributed.run``
    with the model in DistributedDataParallel (gloo on the CPU, NCCL on CUDA)."""
    extra: Mapping[str, Scalar] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check_int("batch_size", self.batch_size, 1)
        if self.input_size is not None:
            _check_int("input_size", self.input_size, 1)
        _check_int("warmup_steps", self.warmup_steps, 0)
        _check_int("steps", self.steps, 2)
        _check_int("seed", self.seed, 0)
        _check_int("num_workers", self.num_workers, 0)
        _check_int("num_threads", self.num_threads, 0)
        _check_int("nproc_per_node", self.nproc_per_node, 1)
        if self.prefetch_factor is not None:
            _check_int("prefetch_factor", self.prefetch_factor, 1)
        _check_choice("precision", self.precision, PRECISIONS)
        _check_choice("memory_format", self.memory_format, MEMORY_FORMATS)
        for name in ("pin_memory", "persistent_workers", "cudnn_benchmark", "deterministic", "allow_tf32"):
            _check_bool(name, getattr(self, name))
        known = {f.name for f in dataclasses.fields(self)}
        for key, value in self.extra.items():
            if key in known:
                raise ValueError(f"extra parameter {key!r} shadows a standard parameter")
            if not _NAME_RE.match(key) or "-" in key or "." in key:
                raise ValueError(f"extra parameter name {key!r} must be a lowercase identifier")
            if not isinstance(value, (bool, int, float, str)):
                raise ValueError(f"extra parameter {key} must be a bool, int, float or str, got {value!r}")
        object.__setattr__(self, "extra", MappingProxyType(dict(self.extra)))

    def to_dict(self) -> dict[str, Scalar | None]:
        """Flat mapping of every parameter, extras included (the form results store).

        A parameter added after files were first written (:data:`LATER_DEFAULTS`) is left
        out at its default, so a result or baseline written before it still compares equal;
        so is an optional parameter the workload left unset (:data:`UNSET`)."""
        out: dict[str, Scalar | None] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name != "extra" and not (f.name in _LEFT_OUT and value == _LEFT_OUT[f.name]):
                out[f.name] = value
        out.update(self.extra)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Params:
        standard = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        kwargs = {k: v for k, v in data.items() if k in standard}
        extra = {k: v for k, v in data.items() if k not in standard}
        return cls(**kwargs, extra=extra)

    def loader_settings(self) -> dict[str, Any]:
        """The DataLoader keyword arguments these parameters pin.

        ``prefetch_factor`` and ``persistent_workers`` only exist for worker processes:
        DataLoader refuses them with ``num_workers=0``, so they are left out there (and
        the result records the settings actually used).
        """
        settings: dict[str, Any] = {
            "batch_size": self.batch_size,
            "num_workers": self.num_workers,
            "pin_memory": self.pin_memory,
        }
        if self.num_workers > 0:
            settings["persistent_workers"] = self.persistent_workers
            if self.prefetch_factor is not None:
                settings["prefetch_factor"] = self.prefetch_factor
        return settings


def _coerce(key: str, raw: str, current: object, field_type: str) -> object:
    """Turn the text of ``--set key=value`` into the type the parameter has."""
    text = raw.strip()
    if field_type == "bool" or isinstance(current, bool):
        low = text.lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
        raise ValueError(f"{key} must be true or false, got {raw!r}")
    if field_type == "optional_int":
        if text.lower() in {"none", "null", ""}:
            return None
        field_type = "int"
    if field_type == "int" or isinstance(current, int):
        try:
            return int(text)
        except ValueError:
            raise ValueError(f"{key} must be an integer, got {raw!r}") from None
    if field_type == "float" or isinstance(current, float):
        try:
            value = float(text)
        except ValueError:
            raise ValueError(f"{key} must be a number, got {raw!r}") from None
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"{key} must be a finite number, got {raw!r}")
        return value
    return text


LATER_DEFAULTS: Mapping[str, Scalar] = MappingProxyType({"nproc_per_node": 1})
"""Parameters that results and baselines of earlier versions do not hold, with the value they
imply: left out of :meth:`Params.to_dict` at that value."""

UNSET: Mapping[str, None] = MappingProxyType({"input_size": None})
"""Optional parameters a workload may leave unset: left out of :meth:`Params.to_dict` then, so
that a result holds only what its workload set. Files written before they became optional
always hold them, set, and compare as they did (a workload that drops one has changed)."""

_LEFT_OUT: Mapping[str, Scalar | None] = MappingProxyType({**LATER_DEFAULTS, **UNSET})

_FIELD_TYPES = {
    "batch_size": "int",
    "input_size": "optional_int",
    "warmup_steps": "int",
    "steps": "int",
    "seed": "int",
    "precision": "str",
    "memory_format": "str",
    "num_workers": "int",
    "pin_memory": "bool",
    "prefetch_factor": "optional_int",
    "persistent_workers": "bool",
    "cudnn_benchmark": "bool",
    "deterministic": "bool",
    "allow_tf32": "bool",
    "num_threads": "int",
    "nproc_per_node": "int",
}


def check_device_params(params: Params, device: str, *, workload: str = "") -> None:
    """What a device asks of the parameters beyond their ranges; a :class:`UsageError` otherwise.

    On CUDA at least one warmup step: the first steps autotune cuDNN, grow the caching
    allocator and load kernels lazily, and none of that may land in the measured window.
    On the CPU ``warmup_steps=0`` stays allowed.
    """
    if device == "cuda" and params.warmup_steps < 1:
        where = f" (workload {workload})" if workload else ""
        raise UsageError(f"warmup_steps must be at least 1 on cuda{where}, got {params.warmup_steps}: the first "
                         "steps autotune cuDNN and grow the allocator, which must not land in the measured window")


def parse_assignments(items: Iterable[str]) -> dict[str, str]:
    """Parse ``key=value`` strings (``--set``); a later key wins over an earlier one."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UsageError(f"--set expects key=value, got {item!r}")
        out[key] = value
    return out


def apply_overrides(params: Params, overrides: Mapping[str, object], *, workload: str = "") -> Params:
    """Return ``params`` with ``overrides`` applied; values may be text (from ``--set``).

    An unknown key or a value out of range is a :class:`UsageError` naming the key and
    what it accepts.
    """
    if not overrides:
        return params
    where = f" for workload {workload}" if workload else ""
    values: dict[str, object] = {**_LEFT_OUT, **params.to_dict()}
    for key, raw in overrides.items():
        if key not in values:
            allowed = ", ".join(sorted(values))
            raise UsageError(f"unknown parameter {key!r}{where}; allowed: {allowed}")
        if isinstance(raw, str):
            try:
                values[key] = _coerce(key, raw, values[key], _FIELD_TYPES.get(key, ""))
            except ValueError as exc:
                raise UsageError(f"bad --set {key}={raw}{where}: {exc}") from None
        else:
            values[key] = raw
    try:
        return Params.from_dict(values)
    except ValueError as exc:
        raise UsageError(f"bad parameter{where}: {exc}") from None


NOT_HASHED = "not hashed"
"""The ``content_hash`` of data perfgate was not told about (and of a script's data)."""


@dataclass(frozen=True)
class DataSource:
    """Where a workload's data came from, recorded in every result.

    ``kind`` and ``content_hash`` must match the baseline's before two runs are compared, and
    every repeat of a run must have read data of the same hash: that is what makes a changed
    dataset INCOMPARABLE instead of a slowdown. A builder that does not declare its data gets
    :meth:`undeclared`, which checks neither.
    """

    kind: str
    """``"real"`` (read from ``--data-root``), ``"synthetic"`` (generated stand-in), or
    ``"undeclared"`` (the builder did not say)."""
    path: str
    content_hash: str
    hash_method: str
    num_samples: int
    description: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def undeclared(cls, loader: object = None) -> DataSource:
        """What a result records when the builder leaves ``Built.data`` out: the dataset's
        type and length, read from ``loader.dataset`` when it has them, and no hash. Its
        ``kind`` and ``content_hash`` are the same for every undeclared dataset, so a change
        of the data is not seen by the comparison: declare a :class:`DataSource` (with a hash
        of the content) when the data can change under the same workload version."""
        dataset = getattr(loader, "dataset", None)
        try:
            samples = len(dataset) if dataset is not None else 0
        except TypeError:  # an iterable dataset has no length
            samples = 0
        shown = type(dataset).__name__ if dataset is not None else type(loader).__name__
        return cls(kind="undeclared", path="", content_hash=NOT_HASHED, hash_method="none", num_samples=samples,
                   description=f"{shown}, not declared by the workload: its content is not hashed or compared")


@dataclass(frozen=True)
class BuildContext:
    """What a builder is given: resolved parameters, device and where data lives."""

    params: Params
    device: str
    data_root: Path | None
    cache_dir: Path
    workload: str = ""
    windows: int = 1
    """Timed windows of ``params.steps`` steps the repeat runs after its warmup (``--windows``):
    a loader sized by hand should hold ``warmup_steps + windows * steps`` batches, as
    ``make_loader``'s does, or it restarts inside a window."""


@dataclass
class Built:
    """What a builder returns. The runner owns the training loop.

    ``loader`` yields ``(inputs, targets)`` batches; the runner moves them to the device
    (the ``h2d`` phase), computes ``loss_fn(model(inputs), targets)`` (``forward``), calls
    ``backward`` and then ``optimizer.step()`` and ``optimizer.zero_grad(set_to_none=True)``
    (``optimizer``). ``data`` may be left out: the result then records
    :meth:`DataSource.undeclared` (what that does not check is said there).
    """

    model: Any
    optimizer: Any
    loss_fn: Callable[[Any, Any], Any]
    loader: Iterable[Any]
    data: DataSource | None = None

    def __post_init__(self) -> None:
        if self.data is None:
            self.data = DataSource.undeclared(self.loader)


@dataclass(frozen=True)
class Workload:
    """A pinned, versioned training workload.

    ``params`` are the reference values; ``profiles`` hold per-device overrides
    (``"cuda"``: the real reference sizes, ``"cpu"``: reduced so a repeat stays short on
    a small machine). Bump ``version`` whenever a change to the builder changes what is
    measured: results of different versions are never compared.
    """

    name: str
    version: int
    build: Callable[[BuildContext], Built]
    params: Params
    profiles: Mapping[str, Mapping[str, Scalar | None]] = field(default_factory=dict)
    description: str = ""
    source: str = ""
    """Where the workload was loaded from; filled in by discovery."""

    def __post_init__(self) -> None:
        if not _NAME_RE.match(self.name):
            raise ValueError(
                f"workload name {self.name!r} must be lowercase letters, digits, '.', '_' or '-'"
            )
        _check_int("version", self.version, 1)
        for device, overrides in self.profiles.items():
            _check_choice("profile", device, DEVICES)
            # Fail at import time, not at run time, if a profile is malformed.
            try:
                check_device_params(apply_overrides(self.params, overrides, workload=self.name), device)
            except UsageError as exc:
                raise ValueError(f"profile {device!r} of workload {self.name}: {exc}") from None
        object.__setattr__(self, "profiles", MappingProxyType({k: dict(v) for k, v in self.profiles.items()}))

    def resolve(self, device: str, overrides: Mapping[str, object] | None = None) -> Params:
        """Parameters for ``device``: the profile applied, then the user's overrides."""
        _check_choice("device", device, DEVICES)
        params = apply_overrides(self.params, self.profiles.get(device, {}), workload=self.name)
        params = apply_overrides(params, overrides or {}, workload=self.name)
        check_device_params(params, device, workload=self.name)
        return params
