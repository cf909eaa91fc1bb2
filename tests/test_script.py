"""``perfgate run --script``: an unmodified training script, timed through hooks in torch.

The scripts in tests/fixtures/scripts/ are written as a user writes a training loop and do
not import perfgate. Most tests run one repeat in this process (the hooks are installed
and removed around the script); the slow ones go through the command line and a fresh
child process per repeat, as a real run does.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from statistics import median
from typing import Any

import pytest
from factories import ENV

from perfgate.adapters.cli import build_parser, main
from perfgate.model.errors import EXIT_ERROR, UsageError, WorkloadError
from perfgate.model.script import ARGS_PARAM, Script
from perfgate.model.workload import PHASES

SCRIPTS = Path(__file__).parent / "fixtures" / "scripts"


def job_of(name: str, args: list[str], sets: dict[str, str] | None = None, *, where: Path = SCRIPTS,
           label: str | None = None) -> Any:
    from perfgate.measure.script_job import script_job, script_of

    script = script_of(str(where / name), args, Path.cwd())
    return script_job(script, "cpu", {"warmup_steps": "2", "steps": "6", "num_threads": "1", **(sets or {})},
                      name=label)


def run_in_process(name: str, args: list[str], sets: dict[str, str] | None = None, **options: Any) -> Any:
    """One repeat of a fixture script in this process: (RepeatResult, data)."""
    from perfgate.measure.script_run import run_script_repeat

    job = job_of(name, args, sets)
    return run_script_repeat(job.script, job.params, "cpu", name=job.workload.name, index=0, telemetry=False,
                             **options)


def medians(repeat: Any) -> dict[str, float]:
    return dict(repeat.medians_ms)


def check_tiles(repeat: Any, steps: int = 6) -> None:
    """Each measured step holds its phases (none negative, their sum within the step)."""
    series = repeat.phases_ms
    assert all(len(series[name]) == steps for name in (*PHASES, "step"))
    for i in range(steps):
        assert all(series[p][i] >= 0 for p in PHASES)
        assert sum(series[p][i] for p in PHASES) <= series["step"][i] + 1e-6
    assert sum(series["step"]) == pytest.approx(repeat.window_s * 1e3, rel=1e-6)


# --- the cases that must work -----------------------------------------------------------------


def test_a_plain_loop_is_timed_phase_by_phase() -> None:
    repeat, data = run_in_process("plain.py", ["--forward-sleep-ms", "4", "--sample-sleep-ms", "0.3"])
    check_tiles(repeat)
    m = medians(repeat)
    assert m["forward"] >= 3.5  # the model sleeps 4 ms per call
    assert m["data_wait"] >= 16 * 0.3 * 0.9  # 16 samples of 0.3 ms each per batch
    assert m["backward"] < m["forward"] and m["optimizer"] < m["forward"]
    script = repeat.torch_settings["script"]
    assert script["optimizer"] == "SGD"
    assert (script["batches_per_step"], script["forwards_per_step"], script["backwards_per_step"]) == (1, 1, 1)
    assert script["samples_per_step"] == 16
    assert repeat.loader_settings["batch_size"] == 16 and repeat.loader_settings["num_batches"] == 16
    assert repeat.timing == "perf_counter"
    assert data["kind"] == "script" and data["path"] == "tests/fixtures/scripts/plain.py"
    assert len(data["script_sha256"]) == 64


def test_the_loss_after_the_model_is_forward_and_a_batch_conversion_is_h2d() -> None:
    repeat, _ = run_in_process("plain.py", ["--loss-sleep-ms", "4", "--double"])
    m = medians(repeat)
    assert m["forward"] >= 3.5  # the loss function (not a module) sleeps: still forward, up to backward
    assert repeat.torch_settings["script"]["h2d_copies_per_step"] == 1  # inputs to float64; targets stay
    assert m["h2d"] > 0


def test_forward_and_backward_inside_the_optimizer_closure_are_forward_and_backward() -> None:
    repeat, _ = run_in_process("closure.py", ["--forward-sleep-ms", "4"])
    check_tiles(repeat)
    m = medians(repeat)
    assert m["forward"] >= 3.5
    assert m["optimizer"] < 2.0  # the closure's forward is not counted as the optimizer's
    assert m["backward"] > 0
    script = repeat.torch_settings["script"]
    assert (script["forwards_per_step"], script["backwards_per_step"]) == (1, 1)


def test_gradient_accumulation_adds_the_passes_of_one_optimizer_step() -> None:
    repeat, _ = run_in_process("accumulate.py", ["--forward-sleep-ms", "2", "--accumulate", "4"])
    check_tiles(repeat)
    m = medians(repeat)
    script = repeat.torch_settings["script"]
    assert (script["batches_per_step"], script["forwards_per_step"], script["backwards_per_step"]) == (4, 4, 4)
    assert script["samples_per_step"] == 32 and script["optimizer"] == "AdamW"
    assert m["forward"] >= 4 * 2 * 0.9  # four passes of 2 ms in one step


@pytest.mark.parametrize(("mode", "expected"), [
    ("no-optimizer", "saw 0 optimizer steps in 1000 DataLoader batches"),
    ("two-optimizers", "two optimizers stepped: SGD, Adam; perfgate times one"),
    ("exit", "exited after 3 optimizer step(s) (3 DataLoader batch(es)); perfgate needs 2 warmup + 6 measured "
             "steps; it called sys.exit(3)"),
    ("short", "ran out of data after 3 optimizer step(s) (3 DataLoader batch(es)); perfgate needs 2 warmup + 6"),
])
def test_a_script_perfgate_cannot_measure_is_one_line_naming_what_it_saw(mode: str, expected: str) -> None:
    with pytest.raises(WorkloadError) as caught:
        run_in_process("misbehave.py", ["--mode", mode])
    message = caught.value.message
    assert message.startswith("script-misbehave: tests/fixtures/scripts/misbehave.py")
    assert expected in message and "\n" not in message
    assert caught.value.exit_code == EXIT_ERROR


def test_the_scripts_own_words_reach_the_message_cleaned() -> None:
    with pytest.raises(WorkloadError) as caught:
        run_in_process("misbehave.py", ["--mode", "raise"])
    message = caught.value.message
    assert "failed after 3 optimizer step(s)" in message
    assert message.endswith("it raised RuntimeError: diverged **Check: passes.**")  # no escape, bell or 2nd line
    assert "\x1b" not in message and "\x07" not in message and "results written" not in message


def test_a_non_finite_loss_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "nan.py").write_text(
        "import torch\nmodel = torch.nn.Linear(2, 1)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for _ in range(50):\n    (model(torch.ones(4, 2)).sum() * float('nan')).backward()\n    opt.step()\n")
    from perfgate.measure.script_run import run_script_repeat

    job = job_of("nan.py", [], where=tmp_path)
    with pytest.raises(WorkloadError, match=r"^script-nan: loss is non-finite \(nan\) at the first measured step$"):
        run_script_repeat(job.script, job.params, "cpu", name=job.workload.name, index=0, telemetry=False)


def test_the_script_cannot_catch_the_stop_with_except_exception() -> None:
    repeat, _ = run_in_process("misbehave.py", ["--mode", "swallow"])
    assert repeat.steps == 6


def test_the_hooks_are_gone_after_the_run_and_argv_is_back() -> None:
    import sys

    import torch
    from torch.optim.optimizer import _global_optimizer_post_hooks, _global_optimizer_pre_hooks
    from torch.utils.data.dataloader import _BaseDataLoaderIter

    before = (torch.nn.Module.__call__, torch.nn.Module.zero_grad, torch.optim.Optimizer.zero_grad,
              _BaseDataLoaderIter.__next__, torch.utils.data.DataLoader.__iter__, torch.autograd.backward,
              torch.Tensor.backward, torch.Tensor.to, torch.Tensor.cuda, "to" in torch.Tensor.__dict__)
    argv, path = sys.argv[:], sys.path[:]
    with pytest.raises(WorkloadError):
        run_in_process("misbehave.py", ["--mode", "raise"])
    run_in_process("plain.py", [])
    after = (torch.nn.Module.__call__, torch.nn.Module.zero_grad, torch.optim.Optimizer.zero_grad,
             _BaseDataLoaderIter.__next__, torch.utils.data.DataLoader.__iter__, torch.autograd.backward,
             torch.Tensor.backward, torch.Tensor.to, torch.Tensor.cuda, "to" in torch.Tensor.__dict__)
    assert after == before
    assert not _global_optimizer_pre_hooks and not _global_optimizer_post_hooks
    assert (sys.argv, sys.path) == (argv, path)


def test_the_script_sees_its_own_argv_and_runs_as_main(tmp_path: Path) -> None:
    seen = tmp_path / "seen.json"
    (tmp_path / "helper_module.py").write_text("VALUE = 7\n")
    (tmp_path / "argv.py").write_text(
        "import json, sys\nimport torch\nimport helper_module\n"
        "if __name__ == '__main__':\n"
        f"    json.dump({{'argv': sys.argv, 'value': helper_module.VALUE}}, open({str(seen)!r}, 'w'))\n"
        "    model = torch.nn.Linear(2, 1)\n    opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "    for _ in range(20):\n        model(torch.ones(4, 2)).sum().backward()\n        opt.step()\n")
    from perfgate.measure.script_run import run_script_repeat

    job = job_of("argv.py", ["--lr", "0.1", "two words"], where=tmp_path)
    repeat, data = run_script_repeat(job.script, job.params, "cpu", name="x", index=0, telemetry=False)
    recorded = json.loads(seen.read_text())
    assert recorded["argv"][1:] == ["--lr", "0.1", "two words"] and recorded["value"] == 7
    assert recorded["argv"][0].endswith("argv.py")
    # without a DataLoader: no data wait, and throughput counts steps
    assert repeat.phases_ms["data_wait"] == (0.0,) * 6 and repeat.torch_settings["script"]["samples_counted"] is False
    assert data["num_samples"] == 0


def test_a_compiled_model_is_compiled_once_and_its_call_is_forward() -> None:
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    repeat, _ = run_in_process("compiled.py", [])
    check_tiles(repeat)
    assert dict(counters["stats"]).get("unique_graphs") == 1  # the hooks add no guard that recompiles
    assert not counters["graph_break"]
    assert repeat.torch_settings["script"]["forwards_per_step"] == 1
    torch._dynamo.reset()


# --- the CUDA timeline, by construction with stand-in events ---------------------------------


class FakeEvent:
    """A CUDA event on the host clock: ``record`` stamps it, reading it needs the sync first."""

    made = 0
    synchronized = [False]

    def __init__(self) -> None:
        FakeEvent.made += 1
        self.at: float | None = None

    def record(self, stream: Any = None) -> None:
        self.at = time.perf_counter()
        FakeEvent.synchronized[0] = False

    def elapsed_time(self, end: FakeEvent) -> float:
        assert FakeEvent.synchronized[0], "an event read before the synchronisation that closes the window"
        assert self.at is not None and end.at is not None
        return (end.at - self.at) * 1e3


def test_the_cuda_timeline_times_device_phases_with_events_and_makes_them_before_the_window() -> None:
    from perfgate.measure.timeline import DeviceTimeline

    made_at_open: list[int] = []

    def sync() -> None:
        FakeEvent.synchronized[0] = True

    class Timeline(DeviceTimeline):
        def open(self, current: int) -> None:
            super().open(current)
            made_at_open.append(FakeEvent.made)

    repeat, _ = run_in_process(
        "closure.py", ["--forward-sleep-ms", "3"],
        timeline=lambda device, steps: Timeline(steps, FakeEvent, synchronize=sync, current_stream=lambda: "s"))
    assert repeat.timing == "cuda_events"
    series = repeat.phases_ms
    assert set(series) >= {*PHASES, "step", "host_step", "device_busy"}
    m = medians(repeat)
    assert m["forward"] >= 2.5 and m["optimizer"] < 2.0
    for i in range(6):
        device = sum(series[p][i] for p in ("h2d", "forward", "backward", "optimizer"))
        assert series["device_busy"][i] == pytest.approx(device)
        assert device <= series["step"][i] + 1e-6
    assert median(series["host_step"]) == pytest.approx(m["step"], rel=0.5)
    assert FakeEvent.made == made_at_open[0]  # no event made inside the window


def test_the_cuda_timeline_adds_intervals_by_their_label() -> None:
    from perfgate.measure.timeline import BACKWARD, DATA, FORWARD, IDLE, OPTIMIZER, DeviceTimeline

    clock = [0.0]

    class Event:
        def record(self, stream: Any = None) -> None:
            self.at = clock[0]

        def elapsed_time(self, end: Any) -> float:
            return end.at - self.at

    line = DeviceTimeline(2, Event, synchronize=lambda: None, current_stream=lambda: None, now=lambda: clock[0] / 1e3)

    def at(ms: float, old: int, new: int) -> None:
        clock[0] = ms
        line.switch(old, new)

    line.open(IDLE)  # at 0
    at(1, IDLE, DATA)
    at(3, DATA, IDLE)  # data wait 2 ms (host)
    at(4, IDLE, FORWARD)
    at(9, FORWARD, BACKWARD)  # forward 5
    at(15, BACKWARD, IDLE)  # backward 6
    at(16, IDLE, OPTIMIZER)
    at(18, OPTIMIZER, IDLE)  # optimizer 2
    clock[0] = 18.5
    line.boundary(IDLE)  # step 1: 18.5 ms
    at(20, IDLE, FORWARD)
    at(21, FORWARD, OPTIMIZER)  # a forward inside the optimizer's closure: 1
    at(23, OPTIMIZER, IDLE)  # optimizer 2
    clock[0] = 30
    line.boundary(IDLE)
    times = line.close()
    s = times.series_ms
    assert s["data_wait"] == [2.0, 0.0]
    assert (s["forward"], s["backward"], s["optimizer"], s["h2d"]) == ([5.0, 1.0], [6.0, 0.0], [2.0, 2.0], [0.0, 0.0])
    assert s["step"] == [18.5, 11.5] and s["device_busy"] == [13.0, 3.0]


# --- the job, the name and comparability ------------------------------------------------------


def test_the_name_comes_from_the_file_and_follows_the_workload_name_rule() -> None:
    assert Script(Path("/x/train.py")).default_name() == "script-train"
    assert Script(Path("/x/My Train (v2).py")).default_name() == "script-my-train-v2"
    assert Script(Path("/x/" + "A" * 100 + ".py")).default_name() == "script-" + "a" * 57
    job = job_of("plain.py", ["--epochs", "3"], label="nightly-train")
    assert job.workload.name == "nightly-train" and job.params.extra[ARGS_PARAM] == "--epochs 3"
    assert job.workload.source.startswith("script:tests/fixtures/scripts/plain.py sha256:")


@pytest.mark.parametrize(("sets", "name", "words"), [
    ({"batch_size": "8"}, None, "--set batch_size: a script sets that itself"),
    ({"warmup_steps": "0"}, None, "warmup_steps must be at least 1 for a script"),
    ({}, "Bad Name", "--name: workload name 'Bad Name' must be"),
])
def test_what_a_script_job_refuses(sets: dict[str, str], name: str | None, words: str) -> None:
    with pytest.raises(UsageError) as caught:
        job_of("plain.py", [], sets, label=name)
    assert words in caught.value.message


def test_a_later_run_of_the_edited_script_is_comparable_and_other_arguments_are_not(tmp_path: Path) -> None:
    from perfgate.analysis.compare import incomparable
    from perfgate.measure.runner import assemble
    from perfgate.measure.script_run import run_script_repeat
    from perfgate.store.baselines import updated_baseline

    shutil.copy(SCRIPTS / "accumulate.py", tmp_path / "train.py")

    def result(args: list[str]) -> Any:
        job = job_of("train.py", args, where=tmp_path)
        responses = []
        for index in range(2):
            repeat, data = run_script_repeat(job.script, job.params, "cpu", name=job.workload.name, index=index,
                                             telemetry=False)
            responses.append({"repeat": repeat.to_dict(), "data": data, "environment": ENV.to_dict()})
        return assemble(job, "cpu", responses)

    first = result(["--accumulate", "2"])
    baseline = updated_baseline(None, first, "first", append=False)
    with (tmp_path / "train.py").open("a") as handle:
        handle.write("\n# an edit: the change under test\n")
    edited = result(["--accumulate", "2"])
    assert edited.workload == first.workload == "script-train"
    assert edited.data["script_sha256"] != first.data["script_sha256"]
    assert incomparable(edited, baseline) == {}
    other = result(["--accumulate", "3"])
    assert set(incomparable(other, baseline)) == {f"param {ARGS_PARAM}"}


# --- the command line -------------------------------------------------------------------------


def test_the_arguments_after_the_double_dash_are_the_scripts() -> None:
    args = build_parser().parse_args(["run", "--script", "train.py", "--steps", "5", "--", "--lr", "0.1", "--", "x"])
    assert (args.script, args.steps, args.script_args, args.workloads) == ("train.py", 5, ["--lr", "0.1", "--", "x"], [])
    plain = build_parser().parse_args(["run", "--", "tiny"])
    assert plain.workloads == ["tiny"] and plain.script is None


@pytest.mark.parametrize(("argv", "words"), [
    (["--script", "tests/fixtures/scripts/plain.py", "tiny"], "--script runs one script, not the workloads named"),
    (["--script", "no/such/train.py"], "--script no/such/train.py: no such file"),
    (["--name", "x", "tiny"], "--name names the result of a --script run"),
    (["--script", "tests/fixtures/scripts/plain.py", "--set", "num_workers=2"], "--set num_workers: a script sets"),
    (["--script", "tests/fixtures/scripts/plain.py", "--data-root", "."], "--data-root does not apply to --script"),
    (["--script", "tests/fixtures/scripts/plain.py", "--shard", "1/2"], "--script runs one script"),
])
def test_bad_script_input_is_one_line_and_exit_2(argv: list[str], words: str, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", "--device", "cpu", "--out", str(tmp_path / "out"), *argv])
    err = capsys.readouterr().err
    assert code == EXIT_ERROR
    assert err.count("\n") == 1 and err.startswith("perfgate: error: ") and words in err


@pytest.mark.slow
def test_a_script_run_from_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two fresh processes, two DataLoader workers each, a script printing fake protocol lines:
    exit 0, the result file, no worker process left, none of the script's lines in perfgate's output."""
    import psutil

    pids = tmp_path / "pids"
    out = tmp_path / "out"
    code = main(["run", "--script", "tests/fixtures/scripts/plain.py", "--device", "cpu", "--repeats", "2",
                 "--warmup", "2", "--steps", "6", "--out", str(out), "--cache-dir", str(tmp_path / "cache"), "-q",
                 "--", "--workers", "2", "--chatty", "--pid-file", str(pids)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "nothing is wrong" not in captured.err and '"ok": true' not in captured.out.lower()
    assert "script-plain v1 on cpu: 2 repeat(s) x 6 steps" in captured.out
    result = json.loads((out / "script-plain.json").read_text())
    assert result["workload"] == "script-plain" and result["params"][ARGS_PARAM].startswith("--workers 2 --chatty")
    assert [len(r["phases_ms"]["step"]) for r in result["repeats"]] == [6, 6]
    assert all(r["loader_settings"]["num_workers"] == 2 for r in result["repeats"])
    workers = [int(line) for line in pids.read_text().split()]
    assert len(workers) == 4  # two per repeat
    deadline = time.monotonic() + 10
    alive = workers
    while alive and time.monotonic() < deadline:
        alive = [p for p in workers if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        time.sleep(0.2)
    assert alive == []


@pytest.mark.slow
def test_two_optimizers_from_the_command_line_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", "--script", "tests/fixtures/scripts/misbehave.py", "--device", "cpu", "--repeats", "1",
                 "--out", str(tmp_path), "-q", "--", "--mode", "two-optimizers"])
    err = capsys.readouterr().err
    assert code == EXIT_ERROR
    assert err == ("perfgate: error: script-misbehave: tests/fixtures/scripts/misbehave.py: two optimizers "
                   "stepped: SGD, Adam; perfgate times one\n")
    assert not (tmp_path / "script-misbehave.json").exists()


def test_a_script_results_table_and_commands_say_how_to_run_the_script_again() -> None:
    """A script's result is shown with the script and its arguments, not the placeholder batch
    and input a script does not have, and the report's commands run the script again:
    ``perfgate run --script ... -- ARGS`` then compare or rebaseline."""
    import dataclasses

    from factories import make_result

    from perfgate.analysis.compare import compare
    from perfgate.analysis.decide import GateConfig
    from perfgate.analysis.outcome import Entry, Lookup
    from perfgate.analysis.summary import summarise
    from perfgate.report.markdown import rebaseline_command, reproduce_command
    from perfgate.report.terminal import run_table

    result = dataclasses.replace(make_result("script-train"), workload_source="script:train.py sha256:" + "a" * 64,
                                 params={**make_result("x").params, ARGS_PARAM: "--epochs 1 --lr '0.1 x'"},
                                 overrides={"steps": 20})
    header = run_table(result, summarise(result)).splitlines()[0]
    assert header.endswith("steps, the script train.py -- --epochs 1 --lr '0.1 x'") and "batch" not in header
    c = compare([Entry("script-train", result, Lookup(None, Path("b.json")))], GateConfig()).comparisons[0]
    run = "perfgate run --script train.py --name script-train --device cpu --set steps=20 -- --epochs 1 --lr '0.1 x'"
    assert reproduce_command(c) == f"{run} && perfgate compare script-train"
    assert rebaseline_command(c).startswith(f"{run} && perfgate rebaseline script-train --from-results perfgate-results")


def test_a_scripts_run_table_names_the_precision_its_steps_ran_in() -> None:
    """The table names the precision the repeats recorded (the autocast dtype in effect), every
    one when they differ; the parameter holds the most common one."""
    import dataclasses

    from factories import make_result

    from perfgate.analysis.summary import summarise
    from perfgate.report.terminal import run_table

    plain = dataclasses.replace(make_result("script-train"), workload_source="script:train.py sha256:" + "a" * 64,
                                params={**make_result("x").params, ARGS_PARAM: ""})

    def recorded(*precisions: str) -> object:
        repeats = tuple(dataclasses.replace(r, torch_settings={**r.torch_settings, "script": {
            "precision": precisions[i % len(precisions)], "precision_from": "autocast"}})
            for i, r in enumerate(plain.repeats))
        return dataclasses.replace(plain, repeats=repeats)

    header = run_table(recorded("bf16"), summarise(plain)).splitlines()[0]
    assert header.endswith("the script train.py, bf16 (autocast)") and "fp32" not in header
    header = run_table(recorded("bf16", "fp32"), summarise(plain)).splitlines()[0]
    assert header.endswith("bf16 (autocast), fp32 (autocast)")
    assert run_table(plain, summarise(plain)).splitlines()[0].endswith("the script train.py")


def test_a_scripts_precision_is_its_result_parameter_and_never_makes_it_incomparable() -> None:
    """The result's ``precision`` is what most repeats' steps ran in; a script that changes it
    (fp32 to bf16 autocast) is measured against its baseline, a workload that does is not."""
    import dataclasses

    from factories import make_result

    from perfgate.analysis.compare import incomparable
    from perfgate.measure.runner import script_measured_params
    from perfgate.store.baselines import updated_baseline

    base = make_result("script-train")
    base = dataclasses.replace(base, params={**base.params, "precision": "fp32"})
    repeats = [dataclasses.replace(r, torch_settings={**r.torch_settings, "script": {"precision": p}})
               for r, p in zip(base.repeats, ["bf16", "bf16", "fp32", "bf16", "bf16"], strict=True)]
    assert script_measured_params(repeats) == {"precision": "bf16"}
    assert script_measured_params(base.repeats) == {}  # no repeat read one: the parameter is left as set
    fp64 = [dataclasses.replace(r, torch_settings={"script": {"precision": "fp64"}}) for r in base.repeats]
    assert script_measured_params(fp64) == {}  # not a workload precision: named in the run table only

    stored = updated_baseline(None, base, "fp32 before", append=False)
    changed = dataclasses.replace(base, params={**base.params, "precision": "bf16"})
    assert incomparable(changed, stored) == {"param precision": ("fp32", "bf16")}
    script = dataclasses.replace(changed, workload_source="script:train.py sha256:" + "a" * 64)
    assert incomparable(script, stored) == {}
    other_args = dataclasses.replace(script, params={**script.params, ARGS_PARAM: "--epochs 2"})
    assert list(incomparable(other_args, stored)) == [f"param {ARGS_PARAM}"]


def test_a_scripts_loader_restart_advice_is_the_scripts_own() -> None:
    import dataclasses

    from factories import make_result

    from perfgate.analysis.diagnose import diagnose

    plain = make_result("x", repeats=2)
    restarted = dataclasses.replace(plain, repeats=tuple(dataclasses.replace(r, loader_restarts=1)
                                                         for r in plain.repeats))
    script = dataclasses.replace(restarted, workload_source="script:train.py sha256:" + "b" * 64)

    def advice(result) -> str:
        return next(label.evidence for label in diagnose(result) if label.name == "LOADER-RESTART")

    assert "make_loader" in advice(restarted)
    assert "make_loader" not in advice(script) and "fewer steps (--warmup, --steps)" in advice(script)


def test_an_injected_delay_lengthens_a_scripts_phase_as_a_workloads() -> None:
    """selftest's known delay reaches a script's repeat too (it was dropped before): the
    optimizer phase of every measured step holds the busy-wait once (this script's steps
    leave the optimizer twice: zero_grad, then the step), the forward phase none of it."""
    plain, _ = run_in_process("plain.py", [])
    slowed, _ = run_in_process("plain.py", [], inject_ms={"optimizer": 3.0})
    assert min(slowed.phases_ms["optimizer"]) >= 3.0  # a busy-wait lasts at least what was asked
    added = medians(slowed)["optimizer"] - medians(plain)["optimizer"]
    assert 2.5 < added < 5.5  # once per step, not once per optimizer interval (6 ms)
    assert medians(slowed)["forward"] < medians(plain)["forward"] + 2.5
