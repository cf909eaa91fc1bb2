"""The pytest plugin (``pytest11`` entry point): the gate as test items.

Inert unless ``--perfgate`` is given. Importing this module imports neither torch nor
the gate's statistics; without the flag the plugin only adds its options (one
``--perfgate-…`` group), registers the ``perfgate`` marker and provides the
``perfgate_comparison`` fixture, which then skips. The options are ``perfgate gate``'s,
made from the same tables (:data:`perfgate.adapters.options.SELECTION_OPTIONS` and
:data:`perfgate.adapters.options.GATE_OPTIONS`): ``--blocks`` is ``--perfgate-blocks``,
with the same default, choices and check, ``--set`` is ``--perfgate-set`` (one value per
use), and the session builds the same gate request (telemetry on, contended repeats
measured again). Only ``--perfgate`` itself is the plugin's own.

With ``--perfgate``, a :class:`GateSession` is registered as a second plugin and kept in
``config.stash[GATE]``. It adds one :class:`PerfgateItem` per selected workload (node id
``perfgate::NAME``) after the collected tests, and runs the gate **once**, lazily, when
the first item or fixture needs a verdict, over every workload that survived
deselection (``-k``, ``-m``) plus those declared with ``@pytest.mark.perfgate``, so
Holm's correction is over the workloads of this run, as with ``perfgate gate``.

How verdicts become outcomes:

- REGRESSION fails the item; the failure text is the workload's markdown section.
- PASS and IMPROVED pass.
- INCONCLUSIVE and NO_BASELINE skip with the verdict and the reason (a skip is counted
  in the summary and listed by ``-rs``; it neither fails the build nor passes for a
  green judgement).
- ERROR and INCOMPARABLE (and NO_BASELINE with ``fail_on_missing_baseline``) raise in
  setup, so pytest reports a test error: the gate could not judge, and a tool failure
  is never shown as a slowdown.
- Ctrl-C or SIGTERM while the gate measures ends the session: no item passes or skips on
  a partial gate, the summary shows what was measured under an INTERRUPTED headline, and
  the exit status is 130 (SIGINT) or 143 (SIGTERM), never a verdict's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from perfgate.adapters.options import add_pytest_options
from perfgate.adapters.pytest_items import GATE, MARKER, NotJudged, marker_workload
from perfgate.adapters.pytest_session import GateSession

if TYPE_CHECKING:
    from perfgate.analysis.outcome import WorkloadComparison


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("perfgate", "perfgate: performance-regression gate for PyTorch training")
    group.addoption("--perfgate", action="store_true", default=False,
                    help="run the perfgate workloads as test items (perfgate::NAME) and gate them "
                         "against the baselines; without it the plugin does nothing")
    # The selection's options and the gate's: the command line's (perfgate gate --set ... --blocks ...),
    # from the same tables (perfgate.adapters.options.SELECTION_OPTIONS and GATE_OPTIONS).
    add_pytest_options(group)


def pytest_configure(config: pytest.Config) -> None:
    # Registered even without --perfgate, so that --strict-markers accepts marked tests.
    config.addinivalue_line(
        "markers",
        f"{MARKER}(workload): the test gets that workload's gate comparison through the "
        "perfgate_comparison fixture; the workload joins the gate run (only with --perfgate)",
    )
    if not config.getoption("perfgate"):
        return
    session = GateSession(config)
    config.stash[GATE] = session
    config.pluginmanager.register(session, "perfgate-session")


# ---------------------------------------------------------------------------------------
# The fixture for tests that declare a workload


@pytest.fixture
def perfgate_comparison(request: pytest.FixtureRequest) -> WorkloadComparison:
    """The gate's :class:`perfgate.WorkloadComparison` of the test's workload (its rows,
    flags and estimates are ``perfgate.PhaseRow``, ``perfgate.PhaseFlag``, ``perfgate.LogRatio``).

    The test declares it with ``@pytest.mark.perfgate(workload="NAME")`` (or
    ``@pytest.mark.perfgate("NAME")``, also as a module's ``pytestmark``). Without
    ``--perfgate`` the test is skipped. ERROR and INCOMPARABLE are test errors, NO_BASELINE
    skips (or is an error with ``fail_on_missing_baseline``); every other verdict,
    REGRESSION and INCONCLUSIVE included, is handed to the test.
    """
    from perfgate.model.verdict import Verdict

    gate = request.config.stash.get(GATE, None)
    if gate is None:
        pytest.skip("perfgate: gated workloads run only with --perfgate")
    marker = request.node.get_closest_marker(MARKER)
    if marker is None:
        pytest.fail(f"{request.node.nodeid}: the perfgate_comparison fixture needs "
                    f'@pytest.mark.{MARKER}(workload="NAME")', pytrace=False)
    comparison = gate.judgeable(marker_workload(marker, request.node.nodeid))
    if comparison.verdict is Verdict.NO_BASELINE:
        raise NotJudged(gate.skip_reason(comparison))
    return comparison
