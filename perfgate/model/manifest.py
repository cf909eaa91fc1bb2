"""The run manifest (``run.json``): what a measuring job says about its run, and its dict form.

``perfgate ci --measure-only`` writes it beside the result files; ``perfgate judge`` reads
it back as untrusted data (``perfgate.store.untrusted_folders.manifest_from_dict`` checks
every field) and uses it to name failures and the pull request, never to choose a rule.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from perfgate.model.design import DesignEvidence
from perfgate.model.version import __version__

MANIFEST_NAME = "run.json"
MANIFEST_KIND = "perfgate.ci-run"
MANIFEST_SCHEMA_VERSION = 1
DESIGNS = ("paired", "stored")
INTERRUPT_SIGNALS = ("SIGINT", "SIGTERM")
"""The signals that end a measuring job early as an interruption (``RunManifest.interrupted``)."""
DECISION_RULE = 2
"""The version of the rule by which a gate stops each workload: the boundary, the spending of α
and the PASS bound over the looks, Holm, the estimates, what leaves a repeat out, how a budget
spends α over the share measured, what an undecided workload ends as (``perfgate.analysis``).
2: a budget spends α over the share of it measured, green has a bound (TOO_NOISY), a slowed-down
repeat leaves its whole block out. Bump it with any change that can make a gate stop
a workload at another look or with another verdict: the judge replays the measuring job's looks
by its own rule and refuses results a job of another rule measured (``RunManifest.decision_rule``),
since that job's stops are not where the judge's rule would stop."""


@dataclass(frozen=True)
class RunManifest:
    """What the measuring job says about its run: who it measured and what went wrong.

    Written by ``perfgate ci --measure-only``; read back as untrusted data. The judge
    uses it to name failures and the pull request, never to choose a rule.
    """

    design: str
    device: str
    workloads: tuple[str, ...]
    """The head's workloads the job set out to measure, in order."""
    pr_number: int | None = None
    head_sha: str | None = None
    head_ref: str | None = None
    head_repo: str | None = None
    base_sha: str | None = None
    base_ref: str | None = None
    errors: Mapping[str, str] = field(default_factory=dict)
    """Head workloads that could not be measured, with the message."""
    base_errors: Mapping[str, str] = field(default_factory=dict)
    """Paired: workloads whose base side could not be measured."""
    base_missing: tuple[str, ...] = ()
    """Paired: head workloads the base commit does not define (new workloads)."""
    base_only: tuple[str, ...] = ()
    """Paired: workloads the base commit defines that the head does not (removed or renamed)."""
    notes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Per workload, repeats or blocks measured again or kept although contended."""
    failure: str | None = None
    """The measuring job's own error, when it could not measure at all."""
    clocks: str | None = None
    shard: str | None = None
    """``I/N`` when the job measured one share of a sharded run (``--shard``); None otherwise."""
    interrupted: str | None = None
    """The signal (:data:`INTERRUPT_SIGNALS`) that ended the measuring before the gate's course
    was run: the results hold only what was measured until then, and are never a verdict.
    None: the job measured to its end."""
    perfgate_version: str = __version__
    decision_rule: int | None = DECISION_RULE
    """The measuring perfgate's :data:`DECISION_RULE`; None: not recorded (a perfgate from before it was)."""
    windows_evidence: Mapping[str, DesignEvidence | None] | None = None
    """``windows = "auto"``: per workload, the pooled evidence its windows were designed from (None:
    none, the pilot's windows), from which the judge re-derives them; None: the windows were not
    designed (a fixed ``windows``, or a perfgate from before ``"auto"``)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": MANIFEST_KIND,
            "schema_version": MANIFEST_SCHEMA_VERSION,
            "perfgate_version": self.perfgate_version,
            "decision_rule": self.decision_rule,
            "design": self.design,
            "device": self.device,
            "workloads": list(self.workloads),
            "pr_number": self.pr_number, "head_sha": self.head_sha, "head_ref": self.head_ref,
            "head_repo": self.head_repo, "base_sha": self.base_sha, "base_ref": self.base_ref,
            "errors": dict(self.errors),
            "base_errors": dict(self.base_errors),
            "base_missing": list(self.base_missing),
            "base_only": list(self.base_only),
            "notes": {k: list(v) for k, v in self.notes.items()},
            "failure": self.failure,
            "clocks": self.clocks,
            **({"shard": self.shard} if self.shard is not None else {}),
            **({"interrupted": self.interrupted} if self.interrupted is not None else {}),
            **({"windows_evidence": {name: None if e is None else e.to_dict()
                                     for name, e in self.windows_evidence.items()}}
               if self.windows_evidence is not None else {}),
        }
