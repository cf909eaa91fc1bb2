"""The pytest nodes of the gate: one :class:`PerfgateItem` per workload under a
:class:`PerfgateCollector` (node ids ``perfgate::NAME``), the marker that declares a
test's workload, and :func:`pytest_outcome`: what a verdict does to its test, from the
policy of ``perfgate.model.verdict`` (``inconclusive = "fail"`` fails an INCONCLUSIVE
item, ``fail_on_missing_baseline`` makes a NO_BASELINE a test error)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import pytest

from perfgate.model.script import Script

if TYPE_CHECKING:
    from perfgate.analysis.outcome import GateOutcome, WorkloadComparison
    from perfgate.gate.config import Settings
    from perfgate.model.verdict import Rules


class JudgingSession(Protocol):
    """What an item asks of the session (``perfgate.adapters.pytest_session.GateSession``,
    which imports this module: the item knows it by this interface only)."""

    outcome: GateOutcome | None
    settings: Settings

    def judgeable(self, workload: str) -> WorkloadComparison: ...
    def failure_text(self, c: WorkloadComparison) -> str: ...
    def skip_reason(self, c: WorkloadComparison) -> str: ...


MARKER = "perfgate"
COLLECTOR_NAME = "perfgate"
GATE: pytest.StashKey[JudgingSession] = pytest.StashKey()
"""``config.stash[GATE]``: the session's :class:`GateSession`, present only with ``--perfgate``."""


def pytest_outcome(c: WorkloadComparison, rules: Rules | None) -> str:
    """What the verdict of ``c`` does to its pytest item under ``rules`` (the gate's
    settings): "passed", "skipped" (not judged, or undecided under ``inconclusive =
    "pass"``), "failed", or "error" (raised in setup: the gate could not judge)."""
    from perfgate.model.verdict import POLICY

    return POLICY[c.verdict].pytest_outcome(rules)


def is_setup_error(c: WorkloadComparison, rules: Rules | None) -> bool:
    """Does the verdict of ``c`` make its test an error, raised in setup (ERROR, INCOMPARABLE,
    NO_BASELINE with ``fail_on_missing_baseline``)?"""
    from perfgate.model.verdict import PYTEST_ERROR

    return pytest_outcome(c, rules) == PYTEST_ERROR



class PerfgateCollector(pytest.Collector):
    """The parent of the workload items, so that their node ids read ``perfgate::NAME``."""

    def __init__(self, *, workloads: Sequence[str] = (), **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.workloads = tuple(workloads)

    def collect(self) -> list[PerfgateItem]:
        return [PerfgateItem.from_parent(self, name=name) for name in self.workloads]


class PerfgateItem(pytest.Item):
    """One workload of the gate run; its outcome is the workload's verdict."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # -m perfgate selects (and -m "not perfgate" drops) these with the user's marked tests.
        self.add_marker(getattr(pytest.mark, MARKER)(workload=self.name))

    @property
    def workload(self) -> str:
        return self.name

    def setup(self) -> None:
        self.comparison = self.config.stash[GATE].judgeable(self.workload)

    def runtest(self) -> None:
        from perfgate.model.verdict import POLICY, PYTEST_ERROR, PYTEST_FAILED, PYTEST_SKIPPED

        gate = self.config.stash[GATE]
        c = self.comparison
        rules = gate.outcome.config if gate.outcome is not None else gate.settings.gate
        outcome = pytest_outcome(c, rules)
        if outcome in (PYTEST_FAILED, PYTEST_ERROR):  # an error is raised in setup already
            p = POLICY[c.verdict]
            note = f"\n({p.strict_when} is set)" if p.strict(rules) else ""
            pytest.fail(gate.failure_text(c) + note, pytrace=False)
        if outcome == PYTEST_SKIPPED:
            raise NotJudged(gate.skip_reason(c))

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, self.nodeid


class NotJudged(pytest.skip.Exception):  # type: ignore[name-defined]  # pytest's public Skipped, set on a function
    """A skip for a workload the gate did not judge (NO_BASELINE) or left undecided
    (INCONCLUSIVE under ``inconclusive = "pass"``).

    Reported at the item's location instead of this file's, without the exception's
    name (see ``GateSession.pytest_runtest_makereport``).
    """

    def __init__(self, reason: str) -> None:
        super().__init__(msg=reason)
        self.reason = reason


def marker_workload(marker: pytest.Mark, where: str) -> str:
    """The name of the workload a ``@pytest.mark.perfgate`` declares: ``workload="NAME"`` (or
    the first argument), or the script's of ``script="train.py"`` (``name=``, else
    ``script-<file name>``)."""
    script = marker_script(marker, where)
    if script is not None:
        return script[2] or Script(Path(script[0])).default_name()
    name = marker.kwargs.get("workload", marker.args[0] if marker.args else None)
    if not isinstance(name, str) or not name:
        raise pytest.UsageError(f'perfgate: {where}: @pytest.mark.{MARKER} needs a workload name, '
                                f'e.g. @pytest.mark.{MARKER}(workload="my-model"), or a script, '
                                f'e.g. @pytest.mark.{MARKER}(script="train.py", args=["--max-steps", "80"])')
    return name


def marker_script(marker: pytest.Mark, where: str) -> tuple[str, tuple[str, ...], str | None] | None:
    """``(path, args, name)`` of ``@pytest.mark.perfgate(script="train.py", args=[...], name=...)``
    (the path relative to the rootdir), or None for a marker that names a workload."""
    if "script" not in marker.kwargs:
        extra = sorted({"args", "name"} & set(marker.kwargs))
        if extra:
            raise pytest.UsageError(f"perfgate: {where}: @pytest.mark.{MARKER}: {extra[0]}= goes with script=")
        return None
    path, args, name = marker.kwargs["script"], marker.kwargs.get("args", ()), marker.kwargs.get("name")
    if "workload" in marker.kwargs or marker.args:
        raise pytest.UsageError(f"perfgate: {where}: @pytest.mark.{MARKER} names a workload or a script, not both")
    if not isinstance(path, str) or not path:
        raise pytest.UsageError(f'perfgate: {where}: @pytest.mark.{MARKER}(script=...) needs the script\'s path, '
                                f'e.g. script="train.py"')
    if isinstance(args, str) or not isinstance(args, (list, tuple)) or not all(isinstance(a, str) for a in args):
        raise pytest.UsageError(f"perfgate: {where}: @pytest.mark.{MARKER}: args= must be a list of strings")
    if name is not None and (not isinstance(name, str) or not name):
        raise pytest.UsageError(f"perfgate: {where}: @pytest.mark.{MARKER}: name= must be a workload name")
    return path, tuple(args), name
