"""Repeats forked from a template (perfgate.measure.template): each a fresh process that
imports the tree under test itself, a child that dies or hangs is that repeat's error, a
template that cannot start falls back to today's start with one warning line.

Real processes on a tiny workload; only behaviour is asserted, never a duration.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from perfgate.measure.paired import Side, measure_paired
from perfgate.measure.runner import measure, run_one
from perfgate.measure.template import FRESH, Starter, Template, TemplateFailed
from perfgate.model.errors import WorkloadError
from perfgate.model.job import Job
from perfgate.store.discovery import discover

pytestmark = pytest.mark.slow

WORKLOAD = '''
import os, random, time
from perfgate import BuildContext, Built, DataSource, Params, Workload

MARK = {mark!r}


def build(ctx: BuildContext) -> Built:
    import torch
    from torch.utils.data import TensorDataset
    from perfgate.measure.loader import make_loader

    p = ctx.params
    out = p.extra["record"]
    if out:
        with open(out, "a") as f:
            f.write(f"{{MARK}} {{os.getpid()}} {{random.random()}}\\n")
    if p.extra["hang"]:
        time.sleep(600)
    die_at = int(p.extra["die_at"])
    calls = {{"n": 0}}

    class Die(torch.nn.Module):
        def forward(self, x):
            calls["n"] += 1
            if calls["n"] == die_at:
                os._exit(3)
            return x

    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(64, 3, 8, 8, generator=g), torch.randint(0, 4, (64,), generator=g))
    model = torch.nn.Sequential(Die(), torch.nn.Conv2d(3, 4, 3), torch.nn.Flatten(), torch.nn.LazyLinear(4))
    model(torch.zeros(1, 3, 8, 8))
    calls["n"] = 0
    source = DataSource("synthetic", "memory", "seed-0", "generator-seed", 64, "random tensors")
    return Built(model, torch.optim.SGD(model.parameters(), lr=0.01), torch.nn.CrossEntropyLoss(),
                 make_loader(data, ctx), source)


FORKED = Workload(
    name="forked", version=1, description="a tiny CNN that can record, hang or die", build=build,
    params=Params(batch_size=8, input_size=8, warmup_steps=1, steps=4, num_threads=1,
                  extra={{"record": "", "hang": False, "die_at": -1}}),
)
'''


def tree(root: Path, mark: str) -> Path:
    root.mkdir(parents=True)
    (root / "forked_workload.py").write_text(WORKLOAD.format(mark=mark))
    return root


def job_in(root: Path, **overrides: object) -> Job:
    workload = discover([root / "forked_workload.py"], project_dir=root).get("forked")
    params = workload.resolve("cpu", {k: str(v) for k, v in overrides.items()})
    return Job(workload, params, overrides)


def one(job: Job, root: Path, starter: Starter, index: int = 0, timeout_s: float = 300.0, **kw: object) -> dict:
    return run_one(job, "cpu", index, root / "cache", (None, None), timeout_s, False, project_dir=root,
                   starter=starter, **kw)


def test_forked_repeats_are_fresh_processes_that_import_their_own_tree(tmp_path: Path) -> None:
    """One template serves base and head: each child imports the tree it is asked to
    measure (the template never imported either), in a process of its own."""
    record = tmp_path / "record.txt"
    base, head = tree(tmp_path / "base", "base"), tree(tmp_path / "head", "head")
    with Starter("fork", renew_every=None) as starter:
        for index, root in enumerate((base, head, head, base)):
            response = one(job_in(root, record=record), root, starter, index)
            assert response["ok"] and len(response["repeat"]["phases_ms"]["step"]) == 4
            assert response["repeat"]["torch_settings"]["process_start"] == "fork"
        assert starter.templates == 1 and starter.processes == 4 and starter.fallback is None
    lines = [line.split() for line in record.read_text().splitlines()]
    assert [mark for mark, _, _ in lines] == ["base", "head", "head", "base"]
    pids = {pid for _, pid, _ in lines}
    assert len(pids) == 4 and str(os.getpid()) not in pids
    # Python's random is seeded from the workload's seed before the build, fresh or forked alike
    assert len({value for _, _, value in lines}) == 1


def test_a_template_serves_a_few_processes_and_is_then_replaced(tmp_path: Path) -> None:
    root = tree(tmp_path / "w", "w")
    # three repeats: the first template serves two, a second one the third
    with Starter("fork", renew_every=2) as starter:
        outcome = measure([job_in(root)], device="cpu", repeats=3, cache_dir=tmp_path / "cache", out_dir=None,
                          project_dir=root, starter=starter, telemetry=False)
    assert not outcome.errors
    assert len(outcome.results["forked"].repeats) == 3
    assert starter.templates == 2 and starter.processes == 3


def test_the_paired_design_renews_the_template_at_every_block(tmp_path: Path) -> None:
    base, head = tree(tmp_path / "base", "base"), tree(tmp_path / "head", "head")
    with Starter("fork", renew_every=None) as starter:
        outcome = measure_paired(Side("head", {"forked": job_in(head)}, head), Side("base", {"forked": job_in(base)}, base),
                                 ["forked"], device="cpu", blocks=2, cache_dir=tmp_path / "cache", out_dir=None,
                                 telemetry=False, starter=starter)
    assert not outcome.head.errors and not outcome.base.errors
    assert {r.block for r in outcome.head.results["forked"].repeats} == {0, 1}
    assert starter.templates == 2 and starter.processes == 8


def test_a_side_under_another_interpreter_makes_both_sides_start_fresh(tmp_path: Path) -> None:
    import sys

    base, head = tree(tmp_path / "base", "base"), tree(tmp_path / "head", "head")
    with Starter("fork") as starter:
        outcome = measure_paired(Side("head", {"forked": job_in(head)}, head),
                                 Side("base", {"forked": job_in(base)}, base, python=sys.executable),
                                 ["forked"], device="cpu", blocks=1, cache_dir=tmp_path / "cache", out_dir=None,
                                 telemetry=False, starter=starter)
    assert not outcome.head.errors and not outcome.base.errors
    assert starter.templates == 0  # the forking starter was not used for either side


def test_a_child_that_dies_mid_window_is_that_repeats_error_and_the_template_goes_on(tmp_path: Path) -> None:
    root = tree(tmp_path / "w", "w")
    with Starter("fork", renew_every=None) as starter:
        with pytest.raises(WorkloadError, match=r"repeat 1 process died \(exit status 3\)"):
            one(job_in(root, die_at=3), root, starter)  # warmup is call 1, the window's first step call 2
        assert one(job_in(root), root, starter, 1)["ok"]
        assert starter.templates == 1 and starter.fallback is None


def test_a_child_that_hangs_is_killed_at_the_timeout_and_named(tmp_path: Path) -> None:
    # The template is ready (torch imported) before the child's clock starts, and the child
    # hangs in its build, so a short timeout is reached by the hang, never by a slow start
    # (the template is started before the child's clock: only the forked child is timed).
    root = tree(tmp_path / "w", "w")
    with Starter("fork", renew_every=None) as starter:
        with pytest.raises(WorkloadError, match=r"repeat 1 did not finish within 1 s"):
            one(job_in(root, hang=True), root, starter, timeout_s=1)
        assert one(job_in(root), root, starter, 1)["ok"]


def test_a_template_that_cannot_start_falls_back_with_one_warning(tmp_path: Path) -> None:
    root = tree(tmp_path / "w", "w")
    warnings: list[str] = []
    # the missing module alone: the template fails at once, without importing torch first
    with Starter("fork", warn=warnings.append, preload=("perfgate_no_such_module",)) as starter:
        assert one(job_in(root), root, starter)["ok"]
        assert one(job_in(root), root, starter, 1)["ok"]
    assert len(warnings) == 1
    assert warnings[0].startswith("warning: repeats start as fresh processes from here on: importing "
                                  "perfgate_no_such_module failed: ModuleNotFoundError")
    assert starter.fallback is not None and not starter.forking


def test_the_template_reports_why_it_cannot_start() -> None:
    with pytest.raises(TemplateFailed, match="importing perfgate_no_such_module failed"):
        Template(preload=("perfgate_no_such_module",))


def test_a_fresh_starter_never_starts_a_template(tmp_path: Path) -> None:
    root = tree(tmp_path / "w", "w")
    starter = Starter("fresh")
    response = one(job_in(root), root, starter)
    assert response["ok"] and response["repeat"]["torch_settings"]["process_start"] == "fresh"
    assert starter.templates == 0 and starter.processes == 1
    with pytest.raises(ValueError, match="start must be one of fork, fresh"):
        Starter("spawn")


def test_several_windows_per_repeat_are_recorded_in_order(tmp_path: Path) -> None:
    from perfgate.model.result import repeat_from_dict

    root = tree(tmp_path / "w", "w")
    with Starter("fork") as starter:
        response = one(job_in(root), root, starter, windows=3)
    repeat = repeat_from_dict(response["repeat"], "repeat")
    assert repeat.windows == 3 and repeat.steps == 12 and repeat.steps_per_window == 4
    assert repeat.loader_restarts == 0  # make_loader holds warmup + 3 x 4 batches: no window restarts it
    assert len(repeat.window_step_ms) == 3
    assert repeat.per_step_ms["step"] == pytest.approx(sum(repeat.window_step_ms) / 3)
    assert repeat.window_s > 0 and response["repeat"]["windows"] == 3


def test_script_mode_times_one_window() -> None:
    from perfgate.model.job import Script

    job = Job.__new__(Job)
    object.__setattr__(job, "script", Script.__new__(Script))
    object.__setattr__(job, "workload", type("W", (), {"name": "script-train"})())
    with pytest.raises(WorkloadError, match="script mode times the script's own steps as one window"):
        run_one(job, "cpu", 0, Path("."), (None, None), 10.0, False, starter=FRESH, windows=2)


POISON = '''
import os

import torch

FORKS = {{"n": 0}}


def _count():  # in the parent, before each fork
    FORKS["n"] += 1


def _poisoned():
    # What torch's own fork handler does once the CUDA driver was initialised in the parent
    # (torch.cuda.is_available() runs cuInit): the child is in the bad-fork state, the
    # parent is not, and torch.cuda.is_initialized() stays False in both.
    if FORKS["n"] > {clean_forks}:
        torch.cuda._is_in_bad_fork = lambda: True


os.register_at_fork(before=_count, after_in_child=_poisoned)
'''


@pytest.mark.parametrize("clean_forks", [0, 1])
def test_a_template_whose_forks_cannot_use_cuda_falls_back_to_fresh_with_one_warning(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clean_forks: int) -> None:
    """A template that imported something calling torch.cuda.is_available() (simulated: its
    children are in torch's bad-fork state, seen when the template is ready, 0 clean forks,
    or only as the child begins, 1) is given up with one warning; every repeat runs fresh."""
    from perfgate.measure.template import _PRELOAD

    modules = tmp_path / "modules"
    modules.mkdir()
    (modules / "perfgate_test_poison.py").write_text(POISON.format(clean_forks=clean_forks))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(modules), os.environ.get("PYTHONPATH")])))
    root = tree(tmp_path / "w", "w")
    warnings: list[str] = []
    with Starter("fork", warn=warnings.append, preload=(*_PRELOAD, "perfgate_test_poison")) as starter:
        for index in range(2):
            response = one(job_in(root), root, starter, index)
            assert response["ok"] and response["repeat"]["torch_settings"]["process_start"] == "fresh"
    assert len(warnings) == 1
    assert warnings[0].startswith("warning: repeats start as fresh processes from here on: ")
    assert ("bad-fork" in warnings[0]) if clean_forks == 0 else ("Cannot re-initialize CUDA" in warnings[0])
    assert starter.fallback is not None and not starter.forking


def test_torchs_bad_fork_error_in_a_forked_child_starts_that_repeat_again_fresh(tmp_path: Path) -> None:
    """A forked child that fails with torch's "Cannot re-initialize CUDA in forked subprocess"
    (here raised by the workload, only when forked) is the template's failure, not the
    repeat's: one warning, and the repeat runs again in a fresh process."""
    root = tree(tmp_path / "w", "w")
    source = (root / "forked_workload.py").read_text()
    (root / "forked_workload.py").write_text(source.replace(
        "    p = ctx.params\n",
        "    p = ctx.params\n"
        "    from perfgate.measure.template import process_start\n"
        "    if process_start() == 'fork':\n"
        "        raise RuntimeError(\"Cannot re-initialize CUDA in forked subprocess. To use CUDA with \"\n"
        "                           \"multiprocessing, you must use the 'spawn' start method\")\n", 1))
    warnings: list[str] = []
    with Starter("fork", warn=warnings.append) as starter:
        response = one(job_in(root), root, starter)
        assert response["ok"] and response["repeat"]["torch_settings"]["process_start"] == "fresh"
        assert one(job_in(root), root, starter, 1)["ok"]
    assert len(warnings) == 1 and "Cannot re-initialize CUDA in forked subprocess" in warnings[0]
    assert starter.templates == 1 and not starter.forking


@pytest.mark.gpu
def test_cuda_a_template_that_called_is_available_is_given_up_with_one_warning(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real poisoned fork: a module the template imports calls torch.cuda.is_available()
    (cuInit, torch's fork handler). The template sees it when ready; the repeats on CUDA run
    fresh, with one warning, instead of failing in the forked children."""
    from perfgate.measure.template import _PRELOAD

    modules = tmp_path / "modules"
    modules.mkdir()
    (modules / "perfgate_test_is_available.py").write_text("import torch\nAVAILABLE = torch.cuda.is_available()\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(modules), os.environ.get("PYTHONPATH")])))
    root = tree(tmp_path / "w", "w")
    workload = discover([root / "forked_workload.py"], project_dir=root).get("forked")
    job = Job(workload, workload.resolve("cuda", {}), {})
    warnings: list[str] = []
    with Starter("fork", warn=warnings.append, preload=(*_PRELOAD, "perfgate_test_is_available")) as starter:
        response = run_one(job, "cuda", 0, root / "cache", (None, None), 300.0, False, project_dir=root,
                           starter=starter)
    assert response["ok"] and response["repeat"]["torch_settings"]["process_start"] == "fresh"
    assert len(warnings) == 1 and "bad-fork" in warnings[0]


@pytest.mark.gpu
def test_cuda_a_clean_template_forks_repeats_that_use_cuda(tmp_path: Path) -> None:
    root = tree(tmp_path / "w", "w")
    workload = discover([root / "forked_workload.py"], project_dir=root).get("forked")
    job = Job(workload, workload.resolve("cuda", {}), {})
    warnings: list[str] = []
    with Starter("fork", warn=warnings.append) as starter:
        response = run_one(job, "cuda", 0, root / "cache", (None, None), 300.0, False, project_dir=root,
                           starter=starter)
    assert not warnings, warnings
    assert response["ok"] and response["repeat"]["torch_settings"]["process_start"] == "fork"
    assert response["repeat"]["timing"] == "cuda_events"
