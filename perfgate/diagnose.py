"""What bounds the step: labels computed from the per-step phases, each with its evidence.

"Low GPU utilisation" is a symptom; the phase split is the diagnosis. For every step of
every repeat the share of each phase in that step is computed, and the median share over
all steps decides the label (a median, so a few slow steps do not relabel a run):

- INPUT-BOUND: data wait ≥ 10% of the step (warning), ≥ 20% (critical);
- H2D-BOUND: host-to-device copies, same thresholds;
- RESIDUAL-HEAVY: the part no phase explains (host syncs such as ``.item()``, logging,
  Python overhead), same thresholds;
- COMPUTE-BOUND: forward + backward + optimizer ≥ 90% of the step (informational);
- BALANCED: none of the above.

Pure: no torch, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import median

from perfgate.result import RunResult

WARNING_SHARE = 0.10
CRITICAL_SHARE = 0.20
COMPUTE_SHARE = 0.90

PHASE_HINTS = {
    "data_wait": "data wait usually moves with DataLoader workers, decoding, augmentation or storage speed",
    "h2d": "host-to-device copies usually move with pinned memory, non-blocking copies or the batch size",
    "forward": "forward usually moves with model or kernel changes, precision or memory format",
    "backward": "backward usually moves with model or kernel changes, precision or memory format",
    "optimizer": "the optimizer step usually moves with its implementation (foreach or fused) or the parameter count",
    "residual": "unattributed time usually moves with a new host sync (.item(), .cpu(), printing a tensor) or logging",
}
"""One line per phase on what usually moves it, shown when the gate flags the phase."""


@dataclass(frozen=True)
class Label:
    name: str
    severity: str
    """``"critical"``, ``"warning"`` or ``"info"``."""
    share: float
    evidence: str

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "severity": self.severity, "share": self.share, "evidence": self.evidence}


def _shares(result: RunResult) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"data_wait": [], "h2d": [], "compute": [], "residual": []}
    for repeat in result.repeats:
        p = repeat.phases_ms
        for i, step in enumerate(p["step"]):
            if step <= 0:
                continue
            compute = p["forward"][i] + p["backward"][i] + p["optimizer"][i]
            out["data_wait"].append(p["data_wait"][i] / step)
            out["h2d"].append(p["h2d"][i] / step)
            out["compute"].append(compute / step)
            out["residual"].append((step - p["data_wait"][i] - p["h2d"][i] - compute) / step)
    return out


def _median_ms(result: RunResult, series: str) -> float:
    return median(v for r in result.repeats for v in r.phases_ms[series])


def diagnose(result: RunResult) -> list[Label]:
    """The labels that apply to ``result``, most severe first; BALANCED when none does."""
    shares = _shares(result)
    if not shares["compute"]:
        return []
    steps = len(shares["compute"])
    where = f"median over {steps} steps of {len(result.repeats)} repeat(s)"
    step_ms = _median_ms(result, "step")
    busy = [sum(r.phases_ms["device_busy"]) / (r.window_s * 1e3) for r in result.repeats if "device_busy" in r.phases_ms]
    busy_note = f"; device busy {median(busy) * 100:.0f}% of the window" if busy else ""
    labels: list[Label] = []
    for name, key, what in (("INPUT-BOUND", "data_wait", "data wait"),
                            ("H2D-BOUND", "h2d", "host-to-device copies"),
                            ("RESIDUAL-HEAVY", "residual", "unattributed time")):
        share = median(shares[key])
        if share >= WARNING_SHARE:
            severity = "critical" if share >= CRITICAL_SHARE else "warning"
            amount = "" if key == "residual" else f"{_median_ms(result, key):.1f} ms, "
            labels.append(Label(name, severity, share,
                                f"{what} {amount}{share * 100:.0f}% of a {step_ms:.1f} ms step ({where}){busy_note}"))
    compute = median(shares["compute"])
    if compute >= COMPUTE_SHARE:
        labels.append(Label("COMPUTE-BOUND", "info", compute,
                            f"forward+backward+optimizer {compute * 100:.0f}% of a {step_ms:.1f} ms step ({where}){busy_note}"))
    if not labels:
        labels.append(Label("BALANCED", "info", compute,
                            f"no phase dominates: compute {compute * 100:.0f}%, data wait "
                            f"{median(shares['data_wait']) * 100:.0f}%, h2d {median(shares['h2d']) * 100:.0f}% "
                            f"of a {step_ms:.1f} ms step ({where}){busy_note}"))
    order = {"critical": 0, "warning": 1, "info": 2}
    return sorted(labels, key=lambda label: order[label.severity])
