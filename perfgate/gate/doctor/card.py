"""The doctor's card: the statuses, one :class:`Check` per line, the :class:`Card` with its
verdict and its JSON form, and :func:`guarded`, which makes a check that could not ask its
question (:class:`Unavailable`) or that broke an ``unknown`` line instead of a traceback.

Statuses: ``ok``; ``warn`` (worth fixing, does not fail); ``FAIL`` (the machine is not fit
to gate: the card's exit code is 1); ``unknown`` (the question could not be asked, with the
reason, such as an NVML call the GPU does not support); ``skipped``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from perfgate.model.errors import EXIT_OK, EXIT_REGRESSION

OK, WARN, FAIL, UNKNOWN, SKIPPED = "ok", "warn", "FAIL", "unknown", "skipped"
STATUSES = (OK, WARN, FAIL, UNKNOWN, SKIPPED)


@dataclass(frozen=True)
class Check:
    """One line of the card."""

    name: str
    status: str
    detail: str
    advice: str = ""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status {self.status!r} is not one of {STATUSES}")


@dataclass
class Card:
    """The checks, in order, and what the card says about the machine."""

    checks: list[Check] = field(default_factory=list)
    machine: dict[str, Any] = field(default_factory=dict)
    cuda_checked: bool = False
    micro_run: dict[str, Any] | None = None
    """The micro-run's figures (:class:`perfgate.measure.probe.MicroRun`), when it ran."""

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if c.status == FAIL]

    @property
    def exit_code(self) -> int:
        return EXIT_REGRESSION if self.failed else EXIT_OK

    def to_dict(self) -> dict[str, Any]:
        return {
            "fit": not self.failed,
            "exit_code": self.exit_code,
            "machine": dict(self.machine),
            "cuda_checked": self.cuda_checked,
            "checks": [asdict(c) for c in self.checks],
            "failed": [c.name for c in self.failed],
            "micro_run": self.micro_run,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Card:
        """The card ``--json`` printed (``scripts/gpu-check.sh`` renders it again as text)."""
        return cls(checks=[Check(**c) for c in data["checks"]], machine=dict(data.get("machine") or {}),
                   cuda_checked=bool(data.get("cuda_checked")), micro_run=data.get("micro_run"))


class Unavailable(Exception):
    """A question that could not be asked; the message is the reason, one line."""


def guarded(name: str, check: Callable[..., Check], *args: Any, **kwargs: Any) -> Check:
    """Run one check; whatever it could not ask becomes an ``unknown`` line with the reason."""
    try:
        return check(*args, **kwargs)
    except Unavailable as exc:
        return Check(name, UNKNOWN, str(exc))
    except Exception as exc:  # noqa: BLE001 - a check must never take the card down
        return Check(name, UNKNOWN, f"the check failed: {type(exc).__name__}: {' '.join(str(exc).split())}")
