"""The verdicts a gate gives a workload, and what each one does, in one place.

:data:`POLICY` holds, per :class:`Verdict`, its meaning (as docs/errors.md says it), its
contribution to the gate's exit code, its icon and CSS class in the reports, the outcome of
its pytest item, the workflow annotation it gets and the words the comment uses for it.
:data:`RUN_POLICY` holds, per exit code of the whole gate, what the pull request is shown:
the headline's word, the step output ``verdict``, the commit status's state, the check
run's conclusion and the comment's "Check:" line.

Two settings change what a verdict does (both are fields of
``perfgate.analysis.decide.GateConfig``, which the functions here take as ``rules``; this
layer cannot import it):

- ``inconclusive`` ("bound", "pass" or "fail"): with "bound" (the default) an undecided
  workload whose interval rules out a slowdown of the gate's bound (``inconclusive_bound``,
  2δ by default) is INCONCLUSIVE, "undecided, but not slower than +X%", which does not fail
  the pull request (exit code 3, status success, check run neutral, the pytest item
  skipped), and one whose interval does not is TOO_NOISY, which fails it as an error (exit
  code 2: the runner could not gate it); with "pass" every undecided workload is
  INCONCLUSIVE and green, however wide its interval; with "fail" every undecided workload
  fails (INCONCLUSIVE: exit code 3 with status and check run failure; TOO_NOISY as above).
- ``fail_on_missing_baseline``: a NO_BASELINE contributes 2 (an error) instead of 0.

The renderers and adapters map through :func:`policy` and :func:`run_policy`, so a new
verdict, or a new consequence of one, is written here and nowhere else.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from perfgate.model.errors import EXIT_ERROR, EXIT_INCONCLUSIVE, EXIT_OK, EXIT_REGRESSION

__all__ = [
    "BISECT_STEPS",
    "CHECK_CONCLUSIONS",
    "EXIT_PRECEDENCE",
    "INCONCLUSIVE_BOUND",
    "INCONCLUSIVE_FAIL",
    "INCONCLUSIVE_FAILING",
    "INCONCLUSIVE_PASS",
    "INCONCLUSIVE_POLICIES",
    "POLICY",
    "PYTEST_ERROR",
    "PYTEST_FAILED",
    "PYTEST_OUTCOMES",
    "PYTEST_PASSED",
    "PYTEST_SKIPPED",
    "RUN_POLICY",
    "STATUS_STATES",
    "Rules",
    "RunPolicy",
    "Verdict",
    "VerdictPolicy",
    "gate_exit_code",
    "policy",
    "run_policy",
]


class Verdict(str, enum.Enum):
    REGRESSION = "REGRESSION"
    PASS = "PASS"
    INCONCLUSIVE = "INCONCLUSIVE"
    TOO_NOISY = "TOO_NOISY"
    IMPROVED = "IMPROVED"
    INCOMPARABLE = "INCOMPARABLE"
    NO_BASELINE = "NO_BASELINE"
    ERROR = "ERROR"


INCONCLUSIVE_BOUND = "bound"
INCONCLUSIVE_PASS = "pass"
INCONCLUSIVE_FAIL = "fail"
INCONCLUSIVE_POLICIES = (INCONCLUSIVE_BOUND, INCONCLUSIVE_PASS, INCONCLUSIVE_FAIL)
"""The values of the ``inconclusive`` setting (``GateConfig.inconclusive``); the first is the default."""

PYTEST_PASSED, PYTEST_SKIPPED, PYTEST_FAILED, PYTEST_ERROR = "passed", "skipped", "failed", "error"
PYTEST_OUTCOMES = (PYTEST_PASSED, PYTEST_SKIPPED, PYTEST_FAILED, PYTEST_ERROR)
"""A pytest item's outcome: "error" is raised in setup, so pytest reports a test error (the gate
could not judge; a tool failure is never shown as a slowdown)."""

STATUS_STATES = ("success", "failure", "error")
"""The commit status states perfgate sets (GitHub's "pending" it never does)."""
CHECK_CONCLUSIONS = ("success", "failure", "neutral")
"""The check run conclusions perfgate reports. A required check passes with success or
neutral; a check run has no "error", so a gate that could not judge is a failure."""

EXIT_PRECEDENCE = (EXIT_REGRESSION, EXIT_ERROR, EXIT_INCONCLUSIVE, EXIT_OK)
"""The gate's exit code is the first of these that one of its verdicts contributes: a
regression wins over an error, an error over an undecided workload."""


class Rules(Protocol):
    """The settings that change what a verdict does (``GateConfig`` has both)."""

    @property
    def inconclusive(self) -> str: ...

    @property
    def fail_on_missing_baseline(self) -> bool: ...


def _inconclusive_fails(rules: Rules | None) -> bool:
    # getattr: a settings object from before the setting existed passes an undecided gate
    return rules is not None and getattr(rules, "inconclusive", INCONCLUSIVE_PASS) == INCONCLUSIVE_FAIL


# --- the whole gate -------------------------------------------------------------------------

@dataclass(frozen=True)
class RunPolicy:
    """What one exit code of the gate shows on a pull request."""

    exit_code: int
    headline: str
    """The headline's word: "perfgate: <headline> (1 PASS, ...)"."""
    word: str
    """The step output ``verdict``."""
    state: str
    """The commit status's state (:data:`STATUS_STATES`)."""
    conclusion: str
    """The check run's conclusion (:data:`CHECK_CONCLUSIONS`)."""
    check_line: str
    """The comment's line on what the check does (markdown, perfgate's words only)."""

    @property
    def fails(self) -> bool:
        """Does this outcome fail the pull request's check?"""
        return self.conclusion == "failure"


_UNDECIDED = "undecided after the planned looks, but not slower than the gate's bound"
_DECIDE_IT = "More repeats or baseline recordings decide it, not a re-run."

RUN_POLICY: dict[int, RunPolicy] = {
    EXIT_OK: RunPolicy(EXIT_OK, "pass", "pass", "success", "success", "**Check: passes.**"),
    EXIT_REGRESSION: RunPolicy(EXIT_REGRESSION, "REGRESSION", "regression", "failure", "failure",
                               "**Check: fails** (exit code 1): a regression."),
    EXIT_ERROR: RunPolicy(EXIT_ERROR, "error", "error", "error", "failure",
                          "**Check: fails as an error** (exit code 2): perfgate could not judge every workload. "
                          "This is not a verdict on speed."),
    EXIT_INCONCLUSIVE: RunPolicy(EXIT_INCONCLUSIVE, "inconclusive", "inconclusive", "success", "neutral",
                                 f"**Check: neutral** (exit code 3): {_UNDECIDED}; the check passes with a "
                                 f"warning. {_DECIDE_IT}"),
}
"""Per exit code, with ``inconclusive = "bound"`` (the default) or ``"pass"``."""

INCONCLUSIVE_FAILING = RunPolicy(
    EXIT_INCONCLUSIVE, "inconclusive", "inconclusive", "failure", "failure",
    f'**Check: fails** (exit code 3): undecided after the planned looks, and `inconclusive = "fail"` makes that '
    f'fail the check. '
    f"{_DECIDE_IT}")
"""Exit code 3 with ``inconclusive = "fail"``."""


def run_policy(exit_code: int, rules: Rules | None = None) -> RunPolicy:
    """What the gate's ``exit_code`` shows under ``rules`` (None: the defaults)."""
    if exit_code == EXIT_INCONCLUSIVE and _inconclusive_fails(rules):
        return INCONCLUSIVE_FAILING
    return RUN_POLICY[exit_code]


# --- one verdict ----------------------------------------------------------------------------

@dataclass(frozen=True)
class VerdictPolicy:
    """What one verdict means and does. ``exit_code`` and ``pytest`` hold under the default
    settings; ``strict_exit_code`` and ``strict_pytest`` under the setting ``strict_when``
    names (INCONCLUSIVE with ``inconclusive = "fail"``, NO_BASELINE with
    ``fail_on_missing_baseline``)."""

    verdict: Verdict
    meaning: str
    """One line, as docs/errors.md says it."""
    exit_code: int
    """Its contribution to the gate's exit code (:data:`EXIT_PRECEDENCE`)."""
    icon: str
    """In the markdown report and the comment."""
    css_class: str
    """In the HTML report."""
    pytest: str
    """The outcome of its pytest item (:data:`PYTEST_OUTCOMES`)."""
    words: str
    """How a sentence of the comment names a workload with this verdict."""
    judged: bool
    """Whether the gate judged the workload's time (a REGRESSION, PASS, IMPROVED or an undecided
    one), as against not judging it at all (INCOMPARABLE, NO_BASELINE, ERROR): what a progress
    line, a headline and the self-test ask of a verdict."""
    bisect: str
    """What a step of ``perfgate bisect`` with this verdict says of its commit
    (:data:`BISECT_STEPS`): ``slow`` (the slowdown is there), ``fast`` (not slower than
    GOOD), ``undecided`` (the search stops, exit 3) or ``error`` (it stops, exit 2)."""
    notice: str | None = None
    """The workflow annotation it gets while it does not fail the check (it gets an error when
    it does): "notice", "warning" or None."""
    strict_when: str | None = None
    """The setting, as written in ``[tool.perfgate]``, under which the strict values hold."""
    strict_exit_code: int | None = None
    strict_pytest: str | None = None

    def strict(self, rules: Rules | None) -> bool:
        """Does the setting that changes this verdict hold in ``rules``?"""
        if rules is None or self.strict_when is None:
            return False
        if self.verdict is Verdict.INCONCLUSIVE:
            return _inconclusive_fails(rules)
        if self.verdict is Verdict.NO_BASELINE:
            return bool(rules.fail_on_missing_baseline)
        return False

    def exit_contribution(self, rules: Rules | None = None) -> int:
        if self.strict(rules) and self.strict_exit_code is not None:
            return self.strict_exit_code
        return self.exit_code

    def pytest_outcome(self, rules: Rules | None = None) -> str:
        if self.strict(rules) and self.strict_pytest is not None:
            return self.strict_pytest
        return self.pytest

    def run(self, rules: Rules | None = None) -> RunPolicy:
        """What a gate of this verdict alone shows (its status state, check conclusion, ...)."""
        return run_policy(self.exit_contribution(rules), rules)

    def conclusion(self, rules: Rules | None = None) -> str:
        return self.run(rules).conclusion

    def fails(self, rules: Rules | None = None) -> bool:
        """Does this verdict fail the pull request's check?"""
        return self.run(rules).fails

    def annotation(self, rules: Rules | None = None) -> str | None:
        """The workflow annotation for a workload with this verdict: "error" when it fails
        the check, else :attr:`notice`."""
        return "error" if self.fails(rules) else self.notice


BISECT_SLOW, BISECT_FAST, BISECT_UNDECIDED, BISECT_ERROR = BISECT_STEPS = ("slow", "fast", "undecided", "error")

POLICY: dict[Verdict, VerdictPolicy] = {p.verdict: p for p in (
    VerdictPolicy(
        Verdict.REGRESSION,
        "slower by more than δ and significantly slower than min_effect·δ (δ/2) after Holm's correction "
        "over the run's workloads, or peak memory, a gated phase or a counter beyond its threshold",
        EXIT_REGRESSION, "❌", "bad", PYTEST_FAILED, "a regression", True, BISECT_SLOW),
    VerdictPolicy(
        Verdict.PASS,
        "the time per step's upper bound below 1 + δ, and the median step no REGRESSION",
        EXIT_OK, "✅", "good", PYTEST_PASSED, "passes", True, BISECT_FAST),
    VerdictPolicy(
        Verdict.INCONCLUSIVE,
        "undecided, but not slower than the gate's bound: the interval reaches above 1 + δ and the evidence is "
        "not enough to call a regression after the planned looks, while its upper bound stays below "
        "inconclusive_bound (2δ by default); the reason gives that bound and the smallest slowdown the run "
        "could detect",
        EXIT_INCONCLUSIVE, "❔", "open", PYTEST_SKIPPED, "undecided", True, BISECT_UNDECIDED, notice="warning",
        strict_when='inconclusive = "fail"', strict_exit_code=EXIT_INCONCLUSIVE, strict_pytest=PYTEST_FAILED),
    VerdictPolicy(
        Verdict.TOO_NOISY,
        "undecided, and too noisy to gate: the time per step's upper bound reaches the gate's bound "
        "(inconclusive_bound, 2δ by default), so a slowdown that large is not ruled out; the reason names the "
        "interval and what the runner would need (blocks, minutes, or a quieter runner)",
        EXIT_ERROR, "📶", "bad", PYTEST_FAILED, "too noisy to gate", True, BISECT_UNDECIDED),
    VerdictPolicy(
        Verdict.IMPROVED,
        "significantly faster, with its estimate below 1/(1 + δ); the reason suggests rebaselining",
        EXIT_OK, "🚀", "better", PYTEST_PASSED, "faster", True, BISECT_FAST, notice="notice"),
    VerdictPolicy(
        Verdict.INCOMPARABLE,
        "the workload version, a parameter or the environment key differs from the baseline's; "
        "the report names exactly what",
        EXIT_ERROR, "⛔", "stop", PYTEST_ERROR, "not comparable with its baseline", False, BISECT_ERROR),
    VerdictPolicy(
        Verdict.NO_BASELINE,
        "no baseline yet, so nothing was judged; the reason gives the command that records one",
        EXIT_OK, "⚠️", "open", PYTEST_SKIPPED, "not judged (no baseline)", False, BISECT_ERROR, notice="warning",
        strict_when="fail_on_missing_baseline", strict_exit_code=EXIT_ERROR, strict_pytest=PYTEST_ERROR),
    VerdictPolicy(
        Verdict.ERROR,
        "the workload could not be measured or compared",
        EXIT_ERROR, "💥", "bad", PYTEST_ERROR, "an error", False, BISECT_ERROR),
)}


def policy(verdict: Verdict) -> VerdictPolicy:
    return POLICY[verdict]


def gate_exit_code(verdicts: Iterable[Verdict], rules: Rules | None = None) -> int:
    """The gate's exit code: 1 on any regression; else 2 when something could not be judged
    (ERROR, INCOMPARABLE; NO_BASELINE with ``fail_on_missing_baseline``); else 3 when
    something is undecided; else 0. ``inconclusive`` does not change it."""
    found = {POLICY[v].exit_contribution(rules) for v in verdicts}
    return next((code for code in EXIT_PRECEDENCE if code in found), EXIT_OK)
