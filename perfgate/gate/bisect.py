"""``perfgate bisect GOOD BAD WORKLOAD``: the first commit that made a workload slower.

The search is git's own bisection: ``git rev-list --bisect-vars BAD ^GOOD ^good...`` names
the commit that halves what is left (the midpoint ``git bisect`` itself would check out),
and each step judges that commit by a paired gate against GOOD. No ``git bisect`` state is
ever written: the search keeps its good and bad commits in memory, each candidate is checked
out in its own temporary worktree, and so is GOOD, once, for the whole search: GOOD as
``base/`` and each candidate in turn as ``head/`` of one temporary directory, sibling trees
of one shape as in the paired gate (:func:`perfgate.gate.worktree.sibling_worktrees`), so
that neither side runs from a path longer, deeper or on another filesystem than the
other's. Every worktree is removed when its step ends, whether by a verdict, an error,
Ctrl-C or SIGTERM. The user's checkout, its HEAD, index and bisect state are never touched.

A step is one paired gate of the candidate (head) against GOOD (base), by the gate's own
rules and on its own driver (``run_gate``: ABBA blocks, Holm over the one workload, δ, the
sequential looks): its first look at ``blocks``, then a look after every block up to
``max_blocks``, α and the PASS bound spent over those looks, so that the step is one decision
at the gate's α however many blocks it takes. A commit is never measured by a second gate:

- REGRESSION: the candidate is bad; the first slow commit is it or an earlier one;
- PASS or IMPROVED: the candidate is good;
- INCONCLUSIVE (undecided at its last look, ``max_blocks``): the search stops (exit 3) with
  the range narrowed so far, never a guess;
- ERROR, INCOMPARABLE (or anything else): the search stops (exit 2) with the reason.

The commit named at the end was itself judged a REGRESSION: when every candidate passed,
BAD is measured too (it is the only one left), and a BAD that is not slower than GOOD is
exit 2, "nothing to bisect".

The judge is injectable (:data:`Judge`), so the search is tested without measuring;
:func:`paired_judge` is the real one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import subprocess
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from perfgate.analysis.blocks import blocks_problem
from perfgate.gate.config import Settings
from perfgate.gate.gating import GateRequest, MeasuringRequest, PairedPlan, run_gate
from perfgate.gate.side_jobs import base_jobs_for
from perfgate.gate.worktree import (
    BASE_NAME,
    HEAD_NAME,
    BaseTree,
    git,
    repository_root,
    resolve_commit,
    sigterm_as_interrupt,
    tree_parent,
    worktree_at,
)
from perfgate.model.errors import EXIT_ERROR, EXIT_INCONCLUSIVE, EXIT_OK, UsageError
from perfgate.model.job import Job
from perfgate.model.verdict import BISECT_FAST, BISECT_SLOW, BISECT_UNDECIDED, POLICY, Verdict
from perfgate.text.inert import flatten, terminal

__all__ = ["Bisection", "Judge", "Judgement", "Plan", "Step", "bisect", "interruptible", "paired_judge",
           "plan_bisection", "replay_log"]

BAD_VERDICTS = frozenset(v for v, p in POLICY.items() if p.bisect == BISECT_SLOW)
GOOD_VERDICTS = frozenset(v for v, p in POLICY.items() if p.bisect == BISECT_FAST)


@dataclass(frozen=True)
class Judgement:
    """The one paired gate of a candidate against GOOD."""

    verdict: Verdict
    reason: str
    """The gate's own reason: the step's change with the interval at the level of its test."""
    blocks: int
    """ABBA blocks the gate measured: those of its last look taken (the one that decided, or
    ``max_blocks`` when it stayed INCONCLUSIVE)."""
    change: float | None = None
    """The step's estimated change, ``ratio - 1`` (None when nothing was estimated)."""
    looks: int = 1
    """Looks the gate took, the first at ``blocks`` of :data:`Judge`, then one per block."""


Judge = Callable[[BaseTree, BaseTree, int, int], Judgement]
"""``judge(candidate, good, blocks, max_blocks)``: the one sequential paired gate of the
candidate's tree against GOOD's, its first look at ``blocks``, its last at ``max_blocks``."""


@dataclass(frozen=True)
class Step:
    """One commit of the search and its gate."""

    number: int
    commit: str
    subject: str
    """The commit's subject, made terminal-safe (untrusted text)."""
    judgement: Judgement

    @property
    def verdict(self) -> Verdict:
        return self.judgement.verdict

    @property
    def bad(self) -> bool:
        return self.verdict in BAD_VERDICTS

    @property
    def good(self) -> bool:
        return self.verdict in GOOD_VERDICTS


@dataclass(frozen=True)
class Bisection:
    """How the search ended: the first slow commit (exit 0), or why it stopped (2, 3)."""

    good: str
    bad: str
    steps: tuple[Step, ...]
    exit_code: int
    first_bad: str | None = None
    first_bad_subject: str = ""
    remaining: tuple[str, ...] = ()
    """The commits the first slow one is still among, oldest first (exit 3)."""
    message: str = ""
    """Why the search stopped without a commit (exit 2 or 3)."""
    subjects: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Each commit named here (GOOD, BAD, the steps, the range) with its terminal-safe subject."""


@dataclass(frozen=True)
class Plan:
    """What the command line names, checked: the repository, GOOD and BAD as full shas."""

    repo: Path
    good: str
    bad: str
    commits: int
    """Commits after GOOD up to BAD (BAD included): the first slow one is among them."""


_NEEDED = "perfgate bisect needs it"


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return git(repo, *args, needed=_NEEDED)


def plan_bisection(start: Path, good: str, bad: str) -> Plan:
    """GOOD and BAD resolved in the repository holding ``start``; bad input is a UsageError
    (one line, exit 2) and nothing has been created yet."""
    repo = repository_root(start, who="perfgate bisect", needed=_NEEDED)
    unshallow = "fetch the history (git fetch --unshallow)"
    good_sha = resolve_commit(repo, good, role="GOOD", unshallow=unshallow, needed=_NEEDED)
    bad_sha = resolve_commit(repo, bad, role="BAD", unshallow=unshallow, needed=_NEEDED)
    if good_sha == bad_sha:
        raise UsageError(f"GOOD and BAD are the same commit {good_sha[:7]}: nothing to bisect")
    ancestor = _git(repo, "merge-base", "--is-ancestor", good_sha, bad_sha)
    if ancestor.returncode == 1:
        raise UsageError(f"GOOD {terminal(good)} ({good_sha[:7]}) is not an ancestor of BAD {terminal(bad)} "
                         f"({bad_sha[:7]}): the search needs GOOD on BAD's history, before it")
    if ancestor.returncode != 0:
        tail = (ancestor.stderr.strip().splitlines() or ["no message"])[-1]
        raise UsageError(f"git merge-base failed: {terminal(tail)}")
    commits = len(_rev_list(repo, bad_sha, [good_sha]))
    return Plan(repo, good_sha, bad_sha, commits)


def _rev_list(repo: Path, bad: str, goods: Sequence[str]) -> list[str]:
    """The commits the first bad one is among: reachable from ``bad``, not from any good; oldest first."""
    done = _git(repo, "rev-list", "--reverse", bad, "--not", *goods)
    if done.returncode != 0:
        raise UsageError(f"git rev-list failed: {terminal(done.stderr.strip())}")
    return done.stdout.split()


def _midpoint(repo: Path, bad: str, goods: Sequence[str]) -> tuple[str, int, int]:
    """git's bisection point of ``bad ^goods``: (commit, commits left, steps left after it)."""
    done = _git(repo, "rev-list", "--bisect-vars", bad, "--not", *goods)
    if done.returncode != 0:
        raise UsageError(f"git rev-list --bisect-vars failed: {terminal(done.stderr.strip())}")
    values = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
    return values["bisect_rev"].strip("'"), int(values["bisect_all"]), int(values["bisect_steps"])


def _subject(repo: Path, commit: str) -> str:
    done = _git(repo, "log", "-1", "--format=%s", commit)
    return terminal(done.stdout.strip(), 200) if done.returncode == 0 else ""


def bisect(plan: Plan, judge: Judge, *, blocks: int, max_blocks: int,
           check_good: Callable[[BaseTree], None] = lambda tree: None,
           started: Callable[[int, str, str, int], None] = lambda number, commit, subject, left: None,
           judged: Callable[[Step], None] = lambda step: None,
           ) -> Bisection:
    """Search ``plan``'s range with ``judge``: see the module's description.

    ``check_good(tree)`` runs once GOOD is checked out (a UsageError there is bad input);
    ``started(number, commit, subject, steps_left)`` before each step; ``judged(step)`` after
    each step's gate, once per step.
    """
    problem = blocks_problem(blocks, "--blocks")
    if problem is not None:
        raise UsageError(problem)
    if max_blocks < blocks:
        raise UsageError(f"--max-blocks {max_blocks} is below --blocks {blocks}")
    repo = plan.repo
    subjects = {plan.good: _subject(repo, plan.good), plan.bad: _subject(repo, plan.bad)}
    steps: list[Step] = []
    goods = [plan.good]
    bad, bad_confirmed = plan.bad, False

    def ended(exit_code: int, *, first_bad: str | None = None, remaining: tuple[str, ...] = (),
              message: str = "") -> Bisection:
        return Bisection(plan.good, plan.bad, tuple(steps), exit_code, first_bad,
                         subjects[first_bad] if first_bad else "", remaining, message, subjects)

    with interruptible(), tree_parent() as parent, worktree_at(repo, plan.good, parent / BASE_NAME) as good_tree:
        check_good(good_tree)
        while True:
            candidate, left, steps_left = _midpoint(repo, bad, goods)
            if left <= 1 or candidate == bad:
                if bad_confirmed:
                    return ended(EXIT_OK, first_bad=bad)
                candidate, steps_left = bad, 0  # every candidate passed: BAD itself must be shown slow
            subjects.setdefault(candidate, _subject(repo, candidate))
            number = len(steps) + 1
            started(number, candidate, subjects[candidate], steps_left)
            with worktree_at(repo, candidate, parent / HEAD_NAME) as tree:
                judgement = judge(tree, good_tree, blocks, max_blocks)
            step = Step(number, candidate, subjects[candidate], judgement)
            steps.append(step)
            judged(step)
            if step.bad:
                bad, bad_confirmed = candidate, True
            elif step.good and candidate == plan.bad:
                return ended(EXIT_ERROR, message=(
                    f"BAD {plan.bad[:7]} is not slower than GOOD {plan.good[:7]} ({step.verdict.value}: "
                    f"{judgement.reason})" + (", and every commit measured between them passed" if
                                              len(steps) > 1 else "") + ": nothing to bisect"))
            elif step.good:
                goods.append(candidate)
            elif POLICY[step.verdict].bisect == BISECT_UNDECIDED:
                remaining = tuple(_rev_list(repo, bad, goods))
                for commit in remaining:
                    subjects.setdefault(commit, _subject(repo, commit))
                return ended(EXIT_INCONCLUSIVE, remaining=remaining, message=(
                    f"{candidate[:7]} is still INCONCLUSIVE at {judgement.blocks} ABBA blocks "
                    f"(--max-blocks {max_blocks}); the search stops here rather than guess"))
            else:
                return ended(EXIT_ERROR, message=(
                    f"step {number}: {candidate[:7]} {subjects[candidate]}: {step.verdict.value}: "
                    f"{terminal(judgement.reason)}"))


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """SIGTERM (a cancelled CI job) raises KeyboardInterrupt here, so that every cleanup runs."""
    with sigterm_as_interrupt():
        yield


def paired_judge(template: Sequence[Job], *, project_dir: Path, workload_paths: Sequence[Path],
                 assignments: Mapping[str, object], settings: Settings, measuring: MeasuringRequest, out_dir: Path,
                 announce: Callable[[str], None] = lambda message: None) -> tuple[Judge, Callable[[BaseTree], None]]:
    """The real judge, one sequential paired gate per call (``run_gate``), and the check that
    GOOD defines the workload.

    ``template`` holds the one job built from the user's checkout (its name, ``--set``
    overrides and data root); each tree's own job is found in that tree with
    :func:`base_jobs_for`, for GOOD (base) and the candidate (head) alike. The gate's
    result files go to ``out_dir/<commit>/`` (and its ``base/``); ``measuring`` is how every
    gate measures (on its device).

    Each call is the gate's own driver with ``settings`` but for the looks: the first at
    ``blocks``, then one after every block up to ``max_blocks`` (``settings.gate.max_blocks``),
    α and the PASS bound spent over them (:func:`perfgate.analysis.driver.schedule_for`). The
    judgement's blocks are those the gate measured (``GateRun.count``, as selftest reads them).

    No wall-time budget: a ``budget`` in ``[tool.perfgate]`` is the CI gate's and is not taken
    here (``perfgate bisect`` has no ``--budget``, so no user set one for the search). A step's
    bound is ``max_blocks``, always given (``--max-blocks``, else 4 × ``--blocks``); a budget
    would also end a step's looks by the runner's speed, which the search would report as
    undecided and end on (exit 3).
    """
    (job,) = template
    name = job.workload.name
    device = measuring.device

    def jobs_in(tree: BaseTree) -> dict[str, Job]:
        return base_jobs_for(template, tree, project_dir=project_dir, workload_paths=list(workload_paths),
                             assignments=dict(assignments), device=device)

    def check_good(tree: BaseTree) -> None:
        if name not in jobs_in(tree):
            raise UsageError(f"GOOD {tree.commit[:7]} has no workload {name!r}: there is nothing to compare with")

    def judge(candidate: BaseTree, good: BaseTree, blocks: int, max_blocks: int) -> Judgement:
        head_jobs = jobs_in(candidate)
        if name not in head_jobs:
            return Judgement(Verdict.ERROR, f"the commit {candidate.commit[:7]} has no workload {name!r}", 0,
                             looks=0)  # no gate ran
        plan = PairedPlan([head_jobs[name]], jobs_in(good), candidate.mirror(project_dir), good.mirror(project_dir),
                          good.commit)
        # One sequential gate per step: looks from ``blocks`` to ``max_blocks``, no budget (see above).
        gate_settings = dataclasses.replace(settings, blocks=blocks, budget_s=None, max_blocks_given=True,
                                            gate=dataclasses.replace(settings.gate, max_blocks=max_blocks))
        gate = run_gate(GateRequest([head_jobs[name]], gate_settings, measuring, out_dir / candidate.commit[:12],
                                    announce=announce, paired=plan))
        if gate.interrupted:  # a step cut short decides nothing: end the bisect as interrupted
            raise KeyboardInterrupt
        (comparison,) = gate.outcome.comparisons
        change = comparison.time.estimate.change if comparison.time is not None else None
        return Judgement(comparison.verdict, comparison.reason, gate.count, change, gate.looks)

    return judge, check_good


def replay_log(bisection: Bisection) -> str:
    """The search as ``git bisect log`` writes it: ``git bisect replay FILE`` takes it up."""
    subject = bisection.subjects
    lines = [f"# bad: [{bisection.bad}] {flatten(subject.get(bisection.bad, ''))}",
             f"# good: [{bisection.good}] {flatten(subject.get(bisection.good, ''))}",
             f"git bisect start '{bisection.bad}' '{bisection.good}'"]
    for step in bisection.steps:
        word = "bad" if step.bad else "good" if step.good else None
        blocks = step.judgement.blocks
        if word is None:
            lines.append(f"# perfgate: {step.verdict.value} at {blocks} ABBA blocks: [{step.commit}] "
                         f"{flatten(step.subject)}")
            continue
        lines.append(f"# {word}: [{step.commit}] {flatten(step.subject)} (perfgate: {step.verdict.value}, "
                     f"{blocks} ABBA blocks)")
        lines.append(f"git bisect {word} {step.commit}")
    if bisection.first_bad:
        lines.append(f"# first bad commit: [{bisection.first_bad}] {flatten(bisection.first_bad_subject)}")
    return "\n".join(lines) + "\n"
