"""Distributed repeats: ranks under torch.distributed.run, per-rank series, STRAGGLER.

The pure parts (combining ranks, finding a straggler, the all-reduce timing's arithmetic,
the result file) are tested on made-up numbers; the tiny two-rank workload
(tests/fixtures/ddp_workloads.py, gloo on two CPU cores) is run for real in the slow lane,
with one rank slowed down on purpose, crashing, hanging or leaving early. Timings are
asserted only through wide-margin relations (an injected 25 ms against a ~10 ms step).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import socket
import time
from pathlib import Path

import psutil
import pytest
from factories import make_result

from perfgate.adapters.cli import main
from perfgate.analysis.diagnose import diagnose
from perfgate.analysis.ranks import BACKWARD_WORK, per_rank_medians, slowest_rank_series, stragglers
from perfgate.analysis.summary import summarise
from perfgate.measure import distributed
from perfgate.measure.ddp import CommTimeline, CommTimer, _union_ms
from perfgate.measure.timeline import BACKWARD, DATA, IDLE, OPTIMIZER, WindowTimes
from perfgate.model.errors import UsageError
from perfgate.model.result import RunResult, repeat_from_dict, result_from_dict
from perfgate.model.workload import Params, apply_overrides
from perfgate.report.markdown import render_workload

FIXTURE = Path(__file__).parent / "fixtures" / "ddp_workloads.py"
PHASE_NAMES = ("data_wait", "h2d", "forward", "backward", "optimizer")


def _rank(data: float = 1.0, forward: float = 3.0, work: float = 4.0, wait: float = 2.0, optimizer: float = 1.0,
          steps: int = 10) -> dict[str, tuple[float, ...]]:
    """One rank's series: backward is its own work plus its wait for the all-reduce."""
    step = data + forward + work + wait + optimizer
    return {"data_wait": (data,) * steps, "h2d": (0.0,) * steps, "forward": (forward,) * steps,
            "backward": (work + wait,) * steps, "optimizer": (optimizer,) * steps, "step": (step,) * steps,
            "comm": (wait,) * steps}


def _distributed(*ranks: dict[str, tuple[float, ...]], repeats: int = 3) -> RunResult:
    base = make_result("tiny-ddp", repeats=repeats)
    reps = []
    for r in base.repeats:
        reps.append(dataclasses.replace(r, phases_ms=slowest_rank_series(list(ranks)), ranks=tuple(ranks)))
    return dataclasses.replace(base, repeats=tuple(reps))


# --- pure ---------------------------------------------------------------------------------


def test_the_step_is_the_slowest_ranks_with_that_ranks_phases() -> None:
    a = {"data_wait": (1.0, 5.0), "backward": (9.0, 2.0), "step": (10.0, 8.0)}
    b = {"data_wait": (2.0, 1.0), "backward": (3.0, 6.0), "step": (7.0, 9.0)}
    assert slowest_rank_series([a, b]) == {"data_wait": (1.0, 1.0), "backward": (9.0, 6.0), "step": (10.0, 9.0)}


def test_a_rank_slow_to_load_is_named_in_the_data_wait() -> None:
    # Rank 1 loads 6 ms longer; rank 0 waits for it at the all-reduce instead.
    result = _distributed(_rank(wait=8.0), _rank(data=7.0, wait=2.0))
    found = stragglers(result)
    assert [(s.rank, s.phase) for s in found] == [(1, "data_wait")]
    assert found[0].excess_ms == pytest.approx(6.0)
    label = next(lb for lb in diagnose(result) if lb.name == "STRAGGLER")
    assert label.rank == 1 and label.phase == "data_wait"
    assert label.to_dict()["rank"] == 1 and label.to_dict()["phase"] == "data_wait"
    assert label.evidence.startswith("rank 1: the data wait 7.0 ms against 1.0 ms")
    assert "the other ranks wait 8.0 ms for the all-reduce" in label.evidence


def test_a_rank_with_slower_backward_kernels_is_found_though_whole_backward_times_match() -> None:
    # Rank 1's backward work takes 6 ms more; rank 0 waits those 6 ms in the all-reduce, so
    # both backward passes end together and take 10 ms: comparing them finds nothing.
    slow = _rank(work=10.0, wait=0.0)
    waiting = _rank(work=4.0, wait=6.0)
    result = _distributed(waiting, slow)
    ranks = per_rank_medians(result.repeats)
    assert ranks is not None and ranks[0]["backward"] == ranks[1]["backward"] == 10.0
    assert ranks[1][BACKWARD_WORK] - ranks[0][BACKWARD_WORK] == pytest.approx(6.0)
    found = stragglers(result)
    assert [(s.rank, s.phase) for s in found] == [(1, "backward")]
    evidence = next(lb for lb in diagnose(result) if lb.name == "STRAGGLER").evidence
    assert "backward without its all-reduce wait 10.0 ms against 4.0 ms" in evidence
    assert "whole backward times look alike (10.0 ms on rank 1, 10.0 ms on the others)" in evidence


def test_below_the_share_of_the_step_no_rank_is_a_straggler() -> None:
    step = _rank()  # 11 ms
    nearly = _rank(data=2.0, wait=1.0)  # 1 ms more data wait: 9% of the step
    assert stragglers(_distributed(step, nearly)) == []
    assert not [lb for lb in diagnose(_distributed(step, nearly)) if lb.name == "STRAGGLER"]
    assert stragglers(_distributed(step, nearly), share=0.05)[0].rank == 1


def test_exposed_all_reduce_is_its_own_label() -> None:
    result = _distributed(_rank(wait=4.0), _rank(wait=4.0))  # 4 of a 13 ms step
    label = next(lb for lb in diagnose(result) if lb.name == "COMM-EXPOSED")
    assert label.severity == "critical" and label.share == pytest.approx(4 / 13)
    assert not [lb for lb in diagnose(_distributed(_rank(wait=0.5), _rank(wait=0.5))) if lb.name == "COMM-EXPOSED"]


def test_a_plain_result_has_no_ranks_and_no_rank_labels() -> None:
    result = make_result("tiny")
    assert per_rank_medians(result.repeats) is None and stragglers(result) == []
    assert summarise(result).ranks == () and summarise(result).comm_share is None


def test_ranks_round_trip_through_the_result_file_and_bad_ones_are_refused() -> None:
    result = _distributed(_rank(), _rank(data=3.0))
    again = result_from_dict(json.loads(json.dumps(result.to_dict())))
    assert again.repeats[0].ranks == result.repeats[0].ranks
    data = result.repeats[0].to_dict()
    one = {**data, "ranks": data["ranks"][:1]}
    with pytest.raises(ValueError, match="at least two ranks"):
        repeat_from_dict(one, "repeats[0]")
    short = json.loads(json.dumps(data))
    short["ranks"][1]["forward"] = short["ranks"][1]["forward"][:-1]
    with pytest.raises(ValueError, match=r"ranks\[1\]: series lengths differ"):
        repeat_from_dict(short, "repeats[0]")
    missing = json.loads(json.dumps(data))
    del missing["ranks"][0]["step"]
    with pytest.raises(ValueError, match=r"ranks\[0\]: missing series step"):
        repeat_from_dict(missing, "repeats[0]")
    assert "ranks" not in make_result("tiny").repeats[0].to_dict()


def test_nproc_per_node_is_a_parameter_that_older_files_need_not_hold() -> None:
    params = Params(batch_size=8, input_size=16, warmup_steps=1, steps=4)
    assert "nproc_per_node" not in params.to_dict()  # files written before it compare equal
    two = apply_overrides(params, {"nproc_per_node": "2"})
    assert two.nproc_per_node == 2 and two.to_dict()["nproc_per_node"] == 2
    assert Params.from_dict(two.to_dict()) == two and Params.from_dict(params.to_dict()) == params
    with pytest.raises(UsageError, match="nproc_per_node must be an integer >= 1"):
        apply_overrides(params, {"nproc_per_node": "0"})


def test_the_combined_response_holds_every_rank() -> None:
    def response(rank: int, step: float) -> dict:
        rep = make_result("tiny", repeats=1).repeats[0]
        phases = {k: [step / 10] * 4 for k in PHASE_NAMES} | {"step": [step] * 4, "comm": [0.1] * 4}
        d = dataclasses.replace(rep, phases_ms={k: tuple(v) for k, v in phases.items()}, window_s=step * 4 / 1e3,
                                samples_per_s=8 / (step / 1e3), peak_memory_bytes=100 * (rank + 1)).to_dict()
        return {"ok": True, "repeat": d, "data": {"content_hash": "x"}, "environment": {"rank": rank}}

    combined = distributed.combine([response(0, 10.0), response(1, 12.0)])
    repeat = repeat_from_dict(combined["repeat"], "combined")
    assert repeat.phases_ms["step"] == (12.0,) * 4
    assert len(repeat.ranks) == 2 and repeat.ranks[0]["step"] == (10.0,) * 4
    assert repeat.window_s == pytest.approx(0.048)
    assert repeat.samples_per_s == pytest.approx(2 * 8 * 4 / 0.048)  # both ranks' samples over the slowest window
    assert repeat.peak_memory_bytes == 200 and repeat.torch_settings["world_size"] == 2
    assert combined["environment"] == {"rank": 0}


class _Ticks:
    """A clock that advances by hand."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class _HostMarks:
    """A timeline that only counts what it is told."""

    timing = "perf_counter"

    def __init__(self) -> None:
        self.marks = 0

    def switch(self, old: int, new: int) -> None:
        self.marks += 1

    def boundary(self, current: int, after: int | None = None) -> None:
        self.marks += 1

    def open(self, current: int) -> None: ...

    def close(self) -> WindowTimes:
        return WindowTimes({"step": [1.0, 1.0]}, 0.002)


class _Future:
    def __init__(self) -> None:
        self.callbacks = []

    def then(self, callback):
        self.callbacks.append(callback)
        return self

    def value(self):
        return "bucket"


def test_the_all_reduce_wait_and_time_in_flight_per_step_on_the_host() -> None:
    now = _Ticks()
    timer = CommTimer(cuda=False, now=now)
    clock = CommTimeline(_HostMarks(), timer, steps=2, warmup_steps=1)
    futures: list[_Future] = []

    def allreduce(state, bucket):
        futures.append(_Future())
        return futures[-1]

    launch = lambda: timer._launch(allreduce, None, None)  # noqa: E731 - the hook as DDP calls it
    launch()  # warmup: not kept, not wrapped
    assert futures[-1].callbacks == []
    clock.open(IDLE)
    for first, second, done, end in ((0.010, 0.012, 0.015, 0.016), (0.030, 0.031, 0.032, 0.040)):
        clock.switch(IDLE, DATA)
        now.t = first
        launch()
        now.t = second
        launch()
        now.t = done
        for future in futures[-2:]:
            assert future.callbacks[0](future) == "bucket"  # the bucket goes back to DDP unchanged
        now.t = end
        clock.switch(BACKWARD, OPTIMIZER)
    times = clock.close()
    assert times.series_ms["comm"] == pytest.approx([4.0, 9.0])  # backward's end less the last launch
    assert times.series_ms["comm_total"] == pytest.approx([5.0, 2.0])  # the launches' spans, joined
    assert times.series_ms["step"] == [1.0, 1.0]


def test_intervals_in_flight_are_joined() -> None:
    assert _union_ms([(0.0, 0.002), (0.001, 0.003), (0.005, 0.006)]) == pytest.approx(4.0)


class _Event:
    def __init__(self, at: list[float]) -> None:
        self.at = at
        self.time: float | None = None

    def record(self, stream=None) -> None:
        self.time = self.at[0]

    def elapsed_time(self, end: _Event) -> float:
        assert self.time is not None and end.time is not None
        return end.time - self.time


class _DeviceMarks(_HostMarks):
    timing = "cuda_events"


def test_on_cuda_the_wait_is_timed_between_events_made_before_the_window() -> None:
    at = [0.0]
    made: list[_Event] = []

    def factory() -> _Event:
        made.append(_Event(at))
        return made[-1]

    timer = CommTimer(cuda=True, event_factory=factory)
    clock = CommTimeline(_DeviceMarks(), timer, steps=2, warmup_steps=2)
    launch = lambda: timer._launch(lambda s, b: _Future(), None, None)  # noqa: E731
    for _ in range(2 * 3):  # two warmup steps of three buckets
        launch()
    clock.open(IDLE)
    before = len(made)
    for offset in (0.0, 100.0):
        clock.switch(IDLE, DATA)
        for t in (1.0, 2.0, 3.0):
            at[0] = offset + t
            launch()
        at[0] = offset + 7.5
        clock.switch(BACKWARD, OPTIMIZER)
    assert len(made) == before and timer.unpooled == 0  # no event was made inside the window
    times = clock.close()
    assert times.series_ms["comm"] == [4.5, 4.5] and "comm_total" not in times.series_ms


_LAUNCHER_SUMMARY = """\
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
perfgate.measure.rank_worker FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-12-02_14:08:38
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 11051)  (SIGTERM)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 11051
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-02_14:08:38
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : 3 (pid: 11052)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================
"""


def test_the_rank_that_failed_first_is_read_from_the_launchers_summary() -> None:
    # The launcher's own words (torch 2.14.1, rank 1 exiting with status 3): rank 0 was ended
    # by SIGTERM after it, and is listed first; the root cause is rank 1.
    assert distributed.root_cause(_LAUNCHER_SUMMARY) == (1, 3)
    assert distributed.root_cause("Traceback: something else\n") is None
    assert distributed.root_cause("Root Cause (first observed failure):\n[0]:\n  host : x\n") is None
    assert distributed._how_it_ended(3) == "it exited with status 3 before answering"
    assert distributed._how_it_ended(-9) == "it was ended by SIGKILL"


def test_a_pinned_port_in_use_or_malformed_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        monkeypatch.setenv(distributed.PORT_VARIABLE, str(port))
        with pytest.raises(UsageError, match=f"port {port} .* is in use"):
            distributed.rendezvous_port()
    monkeypatch.setenv(distributed.PORT_VARIABLE, "http")
    with pytest.raises(UsageError, match="is not a port number"):
        distributed.rendezvous_port()
    monkeypatch.delenv(distributed.PORT_VARIABLE)
    assert 0 < distributed.rendezvous_port() < 65536


def test_more_ranks_than_cores_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("perfgate.measure.telemetry_host.available_cores", lambda: 2)
    distributed.check_devices(2, "cpu")
    with pytest.raises(UsageError, match="nproc_per_node=3 needs a CPU core per rank; this process may use 2"):
        distributed.check_devices(3, "cpu")


def test_the_per_rank_table_shows_the_phases_a_straggler_label_names() -> None:
    from perfgate.analysis.compare import compare
    from perfgate.analysis.decide import GateConfig
    from perfgate.analysis.outcome import Entry, Lookup
    from perfgate.store.baselines import updated_baseline

    result = _distributed(_rank(wait=8.0), _rank(data=7.0, wait=2.0))
    baseline = updated_baseline(None, result, "the same run", append=False)
    outcome = compare([Entry("tiny-ddp", result, Lookup(baseline, Path("tiny-ddp.json")))], GateConfig())
    text = render_workload(outcome, "tiny-ddp")
    assert "**STRAGGLER** (critical): rank 1: the data wait" in text
    assert "| rank | data_wait | step |" in text
    assert "| 0 | 1.00 | 17.00 |" in text and "| 1 | 7.00 | 17.00 |" in text


# --- real ranks (slow) --------------------------------------------------------------------


@pytest.fixture()
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / "workloads").mkdir(parents=True)
    shutil.copy(FIXTURE, root / "workloads" / "ddp_workloads.py")
    return root


def _run(project: Path, capsys: pytest.CaptureFixture[str], *sets: str, extra: tuple[str, ...] = ()):
    cwd = os.getcwd()
    os.chdir(project)
    try:
        code = main(["run", "tiny-ddp", "--device", "cpu", "--repeats", "1", "--quiet", "--out", "out",
                     "--no-telemetry", *extra, *(x for s in sets for x in ("--set", s))])
    finally:
        os.chdir(cwd)
    out, err = capsys.readouterr()
    return code, out, err


def _leftovers(project: Path) -> list[str]:
    """Processes still running in the project (the ranks and the launcher run there)."""
    found = []
    for p in psutil.process_iter(["pid", "cwd", "cmdline"]):
        try:
            if p.info["cwd"] and Path(p.info["cwd"]).resolve() == project.resolve() and p.pid != os.getpid():
                found.append(" ".join(p.info["cmdline"] or []))
        except (psutil.Error, OSError):
            continue
    return found


@pytest.mark.slow
@pytest.mark.parametrize("sets, phase", [(("slow_data_ms=25",), "data_wait"),
                                         (("slow_backward_ms=25",), "backward")])
def test_an_injected_delay_on_rank_1_is_named_as_its_straggler(project: Path, capsys: pytest.CaptureFixture[str],
                                                                sets: tuple[str, ...], phase: str) -> None:
    code, out, err = _run(project, capsys, "slow_rank=1", *sets)
    assert code == 0, err
    result = result_from_dict(json.loads((project / "out" / "tiny-ddp.json").read_text()))
    assert len(result.repeats[0].ranks) == 2
    found = stragglers(result)
    assert found and (found[0].rank, found[0].phase) == (1, phase), found
    assert "STRAGGLER (critical): rank 1:" in out
    assert "per rank (2 ranks" in out and "all-reduce wait" in out
    if phase == "backward":
        ranks = per_rank_medians(result.repeats)
        assert ranks is not None
        # The others wait for rank 1 at backward's end: most of the injected 25 ms.
        assert ranks[0]["comm"] - ranks[1]["comm"] > 12


@pytest.mark.slow
def test_an_even_run_names_no_straggler(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(project, capsys)
    assert code == 0, err
    result = result_from_dict(json.loads((project / "out" / "tiny-ddp.json").read_text()))
    # Nothing injected: no rank is 10% of the step behind (the check that would cry wolf).
    assert [s for s in stragglers(result) if s.share > 0.25] == []
    assert all(len(r.ranks) == 2 and "comm" in r.ranks[0] for r in result.repeats)


@pytest.mark.slow
@pytest.mark.parametrize("sets, message", [
    (("crash_rank=1",), "rank 1: tiny-ddp: the training step failed: RuntimeError: rank 1 blew up on purpose"),
    # The launcher ends rank 0 when rank 1 exits: rank 0 may fail in its collective and answer
    # so, or be ended before it can; either way the cause named is rank 1's exit.
    (("exit_rank=1",), "rank 1 gave no answer (it exited with status 3 before answering); "),
])
def test_a_rank_that_fails_is_one_line_exit_2_and_no_process_is_left(project: Path, capsys, sets, message) -> None:
    code, out, err = _run(project, capsys, *sets)
    assert code == 2
    lines = [line for line in err.splitlines() if line.startswith("perfgate: error:")]
    assert len(lines) == 1 and message in lines[0], err
    assert _leftovers(project) == []


@pytest.mark.slow
def test_a_rank_that_hangs_is_ended_with_every_process_and_the_port(project: Path, capsys,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    port = distributed.rendezvous_port()
    monkeypatch.setenv(distributed.PORT_VARIABLE, str(port))
    began = time.monotonic()
    code, out, err = _run(project, capsys, "hang_rank=1", extra=("--timeout", "12"))
    assert code == 2
    lines = [line for line in err.splitlines() if line.startswith("perfgate: error:")]
    # Either the repeat's timeout ends it, or rank 0's all-reduce gives up first (its collectives
    # time out a little before the repeat) and the launcher ends rank 1: both say so in one line.
    assert len(lines) == 1, err
    assert ("did not finish within 12 s" in lines[0]
            or "rank 1 gave no answer (" in lines[0]), err
    assert time.monotonic() - began < 600  # ended, not waited out for the hour
    assert _leftovers(project) == []
    assert distributed._free(port), "something is still listening on the rendezvous port"


@pytest.mark.slow
def test_a_port_in_use_and_too_many_ranks_are_one_line_exit_2(project: Path, capsys,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        monkeypatch.setenv(distributed.PORT_VARIABLE, str(taken.getsockname()[1]))
        code, _, err = _run(project, capsys)
    assert code == 2 and "is in use" in err and len([x for x in err.splitlines() if "error:" in x]) == 1
    monkeypatch.delenv(distributed.PORT_VARIABLE)
    code, _, err = _run(project, capsys, "nproc_per_node=64")
    assert code == 2 and "nproc_per_node=64 needs a CPU core per rank" in err
    assert _leftovers(project) == []


def test_the_html_report_has_the_per_rank_table_too() -> None:
    from perfgate.analysis.compare import compare
    from perfgate.analysis.decide import GateConfig
    from perfgate.analysis.outcome import Entry, Lookup
    from perfgate.report.html import render_html
    from perfgate.store.baselines import updated_baseline

    result = _distributed(_rank(wait=2.0), _rank(work=10.0, wait=0.0))  # rank 1: slower backward work
    baseline = updated_baseline(None, result, "the same run", append=False)
    page = render_html(compare([Entry("tiny-ddp", result, Lookup(baseline, Path("tiny-ddp.json")))], GateConfig()))
    assert "<h3>Per rank</h3>" in page
    assert "<th>backward w/o wait</th>" in page and "<th>all-reduce wait</th>" in page
    assert "rank 1: backward without its all-reduce wait" in page


def test_a_default_selection_leaves_out_what_this_machine_cannot_run(capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    """A single-GPU runner gates the single-process workloads: by default the two-rank one is
    left out and named; named on the command line it runs and fails in one line."""
    from perfgate.adapters import selection
    from perfgate.adapters.cli import build_parser
    from perfgate.gate.config import Settings

    monkeypatch.setattr("perfgate.measure.telemetry_host.available_cores", lambda: 1)

    def selected(*argv: str) -> list[str]:
        _, jobs = selection.jobs_of(build_parser().parse_args(["run", "--device", "cpu", *argv]), Settings())
        return [j.workload.name for j in jobs]

    names = selected()
    assert "resnet18-cifar10-ddp" not in names and "resnet18-cifar10" in names
    assert ("perfgate: resnet18-cifar10-ddp left out of the default selection: nproc_per_node=2 needs a CPU core "
            "per rank; this process may use 1") in capsys.readouterr().err
    assert selected("resnet18-cifar10-ddp") == ["resnet18-cifar10-ddp"]
    # Asked for by --set: nothing is left out; each fails in one line when measured.
    assert len(selected("--set", "nproc_per_node=2")) == len(names) + 1


def test_the_straggler_share_is_a_setting(tmp_path: Path) -> None:
    """``straggler_share`` in [tool.perfgate] (or a workload's own table) moves STRAGGLER's
    threshold; it must lie between 0 and 1."""
    from perfgate.analysis.compare import compare
    from perfgate.analysis.decide import GateConfig
    from perfgate.analysis.outcome import Entry, Lookup
    from perfgate.gate.config import load_settings

    result = _distributed(_rank(), _rank(data=2.0, wait=1.0))  # 1 ms of an 11 ms step: 9%
    names = lambda config, per=None: [lb.name for lb in compare(  # noqa: E731
        [Entry("tiny-ddp", result, Lookup(None, Path("b.json")))], config, per_workload=per).comparisons[0].labels]
    assert "STRAGGLER" not in names(GateConfig())
    assert "STRAGGLER" in names(GateConfig(straggler_share=0.05))
    assert "STRAGGLER" in names(GateConfig(), {"tiny-ddp": GateConfig(straggler_share=0.05)})
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text("[tool.perfgate]\nstraggler_share = 0.05\n")
    assert load_settings(pyproject).gate.straggler_share == 0.05
    pyproject.write_text("[tool.perfgate]\nstraggler_share = 1.5\n")
    with pytest.raises(UsageError, match="straggler_share must be between 0 and 1"):
        load_settings(pyproject)


def test_leaving_out_what_does_not_fit_imports_no_torch(tmp_path: Path) -> None:
    """Choosing the jobs stays in the parent without torch: the core count is read from the OS."""
    import subprocess
    import sys

    code = ("import sys\n"
            "from perfgate.adapters import selection\n"
            "from perfgate.adapters.cli import build_parser\n"
            "from perfgate.gate.config import Settings\n"
            "_, jobs = selection.jobs_of(build_parser().parse_args(['run', '--device', 'cpu']), Settings())\n"
            "assert 'resnet18-cifar10-ddp' in [j.workload.name for j in jobs]\n"
            "print('torch' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out.stderr
