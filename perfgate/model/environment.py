"""The environment fingerprint and the key that says which results are comparable.

Collecting the fingerprint needs torch (``perfgate.measure.fingerprint``); this module only
holds the data and derives the key, so the comparing side can use it without torch.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

KEY_FIELDS = (
    "device",
    "gpu_name",
    "cuda",
    "cudnn",
    "torch",
    "torchvision",
    "python",
    "cpu_model",
    "cpu_count",
)
"""Fields that change what a measurement means. The GPU driver, the OS and the commit are
recorded but left out of the key: a driver update or a new commit must still be compared
with the old baseline (that is the point of the gate). On the CUDA device ``gpu_clocks``
joins them (:data:`CUDA_KEY_FIELDS`)."""

CUDA_KEY_FIELDS = (*KEY_FIELDS, "gpu_clocks")
"""The comparable fields on the CUDA device: a run at a locked graphics clock is not
compared with one whose clock was free (or locked at another frequency)."""

GPU_CLOCKS_UNLOCKED = "unlocked"
GPU_CLOCKS_UNKNOWN = "unknown"
GPU_CLOCKS_VARIABLE = "PERFGATE_GPU_CLOCKS"
"""Set by the runner after it tried to lock the graphics clock: ``locked:<MHz>`` (an
integer from 100 to 5000, e.g. ``locked:1245``) or ``unlocked``."""
GPU_CLOCKS_MHZ_RANGE = (100, 5000)
_LOCKED = re.compile(r"locked:([1-9][0-9]{2,3})")  # ASCII digits, no sign, no leading zero


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), else what ``platform`` says."""
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine() or "unknown"


def parse_gpu_clocks(value: str | None) -> tuple[str, int | None]:
    """A ``PERFGATE_GPU_CLOCKS`` value: ("locked", MHz), ("unlocked", None), ("unset", None)
    or ("bad", None). The one reading of the variable, for the fingerprint and the doctor."""
    if value is None:
        return "unset", None
    if value == "unlocked":
        return "unlocked", None
    match = _LOCKED.fullmatch(value)
    if match is not None and GPU_CLOCKS_MHZ_RANGE[0] <= int(match[1]) <= GPU_CLOCKS_MHZ_RANGE[1]:
        return "locked", int(match[1])
    return "bad", None
"""Values of ``Environment.gpu_clocks`` besides ``"locked <MHz> MHz"``. A CUDA result
without the field (written before it existed) compares as unknown."""


@dataclass(frozen=True)
class Environment:
    device: str
    torch: str
    python: str
    cpu_model: str
    cpu_count: int
    os: str
    gpu_name: str | None = None
    gpu_driver: str | None = None
    cuda: str | None = None
    cudnn: str | None = None
    torchvision: str | None = None
    git_commit: str | None = None
    git_dirty: bool | None = None
    gpu_clocks: str | None = None
    """The graphics-clock lock of the GPU while it measured: ``"locked 1245 MHz"``,
    ``"unlocked"`` or ``"unknown"`` (the runner did not say); None on the CPU device."""
    gpu_uuid: str | None = None
    """Which GPU measured (``GPU-…``, as ``nvidia-smi -L`` names it), so that a fleet's
    history tells its cards apart; None on the CPU or when torch cannot say. Never in the
    key: two cards of one model are compared, that is what a fleet is."""

    def comparable_fields(self) -> dict[str, Any]:
        """What must match for two results to be compared. ``gpu_clocks`` is present only
        on the CUDA device (None there reads as unknown), so CPU keys never depend on it."""
        values = {name: getattr(self, name) for name in KEY_FIELDS}
        # Patch releases of Python do not change training speed; minor releases may.
        values["python"] = ".".join(self.python.split(".")[:2])
        if self.device == "cpu":
            # A CPU run never touches the GPU: a card in the box must not split the key.
            values["gpu_name"] = values["cuda"] = values["cudnn"] = None
        if self.device == "cuda":
            values["gpu_clocks"] = self.gpu_clocks or GPU_CLOCKS_UNKNOWN
        return values

    def key(self) -> str:
        """A short, stable, filesystem-safe key, e.g. ``cuda-tesla-t4-torch2.14.1-1a2b3c4d``."""
        fields = self.comparable_fields()
        if fields.get("gpu_clocks") == GPU_CLOCKS_UNKNOWN:
            # Hashed as the absent field: a CUDA result that does not know its clocks keeps
            # the key it had before the field existed, and so do the baselines stored under
            # it. Unknown still differs from locked and unlocked, whose values are hashed.
            del fields["gpu_clocks"]
        digest = hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:8]
        hardware = self.gpu_name if self.device == "cuda" and self.gpu_name else self.cpu_model
        slug = re.sub(r"[^a-z0-9]+", "-", hardware.lower()).strip("-")[:32].strip("-") or "unknown"
        torch_version = self.torch.split("+")[0]
        return f"{self.device}-{slug}-torch{torch_version}-{digest}"

    def differences(self, other: Environment) -> dict[str, tuple[Any, Any]]:
        """Comparable fields that differ, as ``{field: (self, other)}``.

        A field only one side has (``gpu_clocks`` when one side is not CUDA) is not listed:
        the device already differs, and says so.
        """
        mine, theirs = self.comparable_fields(), other.comparable_fields()
        return {k: (mine[k], theirs[k]) for k in CUDA_KEY_FIELDS
                if k in mine and k in theirs and mine[k] != theirs[k]}

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        for name in ("gpu_clocks", "gpu_uuid"):
            if data[name] is None:
                # CPU results and baselines are written as they were before the field existed.
                del data[name]
        data["key"] = self.key()
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Environment:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})
