"""The base decides the design: what the judge accepts is what the base's settings and tree
make the measuring job measure, re-derived by the judge, never read from the artifact.

Each case writes a results folder and runs ``perfgate judge`` on it, with its control: the
same files without the attack fail the gate as they should (a head 20% slower is a
REGRESSION, exit 1). Every attack ends with exit 2 (an ERROR naming the field and both
values, or a one-line refusal), never 0 or 3. docs/threat-model.md lists them.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from factories import ENV, define_workloads, make_result
from test_judge import BASE_SHA, HEAD_SHA, paired, record, run, write_run
from test_judge_fail_closed import SLOW, control, edit_result, rewrite_manifest
from test_shard import judge as judge_shards

from perfgate.model.errors import UsageError
from perfgate.model.manifest import DECISION_RULE, RunManifest
from perfgate.model.result import RunResult
from perfgate.model.script import ARGS_PARAM

CUDA_ENV = dataclasses.replace(ENV, device="cuda", gpu_name="Tesla T4", cuda="12.4", gpu_clocks="locked 1245 MHz")


def settings(base: Path, extra: str) -> None:
    """The base's ``[tool.perfgate]`` with the lines of ``extra`` set: a key it sets already
    (the fixture's ``windows = 1``) takes the new value, any other is added."""
    path = base / "pyproject.toml"
    lines = path.read_text().splitlines()
    for line in extra.splitlines():
        key = line.split("=", 1)[0].strip()
        at = next((i for i, old in enumerate(lines) if old.split("=", 1)[0].strip() == key), None)
        if at is None:
            lines.append(line)
        else:
            lines[at] = line
    path.write_text("\n".join(lines) + "\n")


def each_repeat(result: RunResult, **fields: object) -> RunResult:
    return dataclasses.replace(result, repeats=tuple(dataclasses.replace(r, **fields) for r in result.repeats))


def started(result: RunResult, how: str) -> RunResult:
    return dataclasses.replace(result, repeats=tuple(
        dataclasses.replace(r, torch_settings={**r.torch_settings, "process_start": how}) for r in result.repeats))


def tiled(result: RunResult, windows: int) -> RunResult:
    """``result`` timed as ``windows`` windows of its workload's steps a process: each repeat's
    steps, one window's worth, timed again and again (the windows a base that sets them gives)."""
    return dataclasses.replace(result, repeats=tuple(dataclasses.replace(
        r, windows=windows, window_s=r.window_s * windows, phases_ms={k: v * windows for k, v in r.phases_ms.items()})
        for r in result.repeats))


def blocked(result: RunResult) -> RunResult:
    """``result``'s repeats in ABBA blocks, two a side each (as ``test_judge.paired``)."""
    return dataclasses.replace(result, repeats=tuple(dataclasses.replace(r, block=i // 2)
                                                     for i, r in enumerate(result.repeats)))


def judged_workload(tmp_path: Path, name: str) -> dict:
    report = json.loads((tmp_path / "judged" / "report.json").read_text())
    return next(w for w in report["workloads"] if w["workload"] == name)


def sides(edit, **head_kw: object) -> tuple[dict[str, RunResult], dict[str, RunResult]]:
    """tiny's head (20% slower) and base side, each passed through ``edit``."""
    return ({"tiny": edit(paired("tiny", scale=SLOW, seed=1, **head_kw))},  # type: ignore[arg-type]
            {"tiny": edit(paired("tiny", seed=2))})


# --- case 5: windows, steps, --set and start are the base's ---------------------------------

def test_windows_the_base_does_not_give_are_an_error_naming_both(tmp_path: Path, base: Path) -> None:
    """`--windows 10` (each repeat's 10 steps timed as ten windows of one step)."""
    assert run(tmp_path, control(tmp_path), base)[0] == 1
    folder = write_run(tmp_path / "r", *sides(lambda r: each_repeat(r, windows=10)))
    code, _, _, comment = run(tmp_path, folder, base)
    w = judged_workload(tmp_path, "tiny")
    assert code == 2 and w["verdict"] == "ERROR", comment
    assert w["reason"] == ("not measured as the base's settings design it: windows: the base's settings give 1, the "
                           "head side's repeat 1 holds 10")
    # the base's own windows = 10: ten windows of the workload's 10 steps each, judged
    settings(base, "windows = 10\n")
    assert run(tmp_path, write_run(tmp_path / "ten", *sides(lambda r: tiled(r, 10))), base)[0] == 1
    # ... and the same ten steps told as ten windows of one are not: a window is the workload's steps
    code, _, _, comment = run(tmp_path, folder, base)
    assert code == 2 and judged_workload(tmp_path, "tiny")["reason"] == (
        "not measured as the base's settings design it: steps per window: the workload's steps give 10, the head "
        "side's repeat 1 holds 10 window(s) of 1"), comment


def test_steps_relabelled_as_more_windows_than_the_workload_times_are_an_error_naming_both(
        tmp_path: Path, base: Path) -> None:
    """`windows = "auto"`: run.json's evidence gives the windows, and the results hold them. A
    process's 12 steps of a workload of 4 (3 windows of 4) relabelled as 6 windows of 2, with
    evidence that gives 6: the windows agree with the evidence, but each window is not the
    workload's steps (the median step of 2 steps is their mean, which a stall every fourth step
    reaches). The control, 3 windows of 4, is judged; the relabelled run is an ERROR naming both."""
    from test_auto_windows import evidence

    from perfgate.analysis.design import choose_windows

    three, six = evidence(process_s=9.0), evidence(process_s=36.0)
    assert (choose_windows(three), choose_windows(six)) == (3, 6)
    settings(base, 'windows = "auto"\n')
    params = {"batch_size": 8, "steps": 4}

    def measured(windows: int, recorded) -> Path:
        def made(scale: float, seed: int) -> RunResult:
            result = make_result("tiny", repeats=6, scale=scale, seed=seed, params=params, steps=12)
            return blocked(dataclasses.replace(result, repeats=tuple(
                dataclasses.replace(r, windows=windows) for r in result.repeats)))

        manifest = RunManifest(design="paired", device="cpu", workloads=("tiny",), pr_number=7, head_sha=HEAD_SHA,
                               base_sha=BASE_SHA, base_ref="main", windows_evidence={"tiny": recorded})
        return write_run(tmp_path / f"w{windows}", {"tiny": made(SLOW, 1)}, {"tiny": made(1.0, 2)}, manifest)

    code, out, _, comment = run(tmp_path, measured(3, three), base)
    assert code == 1 and "REGRESSION" in out, comment
    code, _, _, comment = run(tmp_path, measured(6, six), base)
    w = judged_workload(tmp_path, "tiny")
    assert code == 2 and w["verdict"] == "ERROR", comment
    assert w["reason"] == ("not measured as the base's settings design it: steps per window: the workload's steps "
                           "give 4, the head side's repeat 1 holds 6 window(s) of 2")


@pytest.mark.parametrize(("overrides", "shown"), [
    ({"steps": 1}, "'steps=1'"),                      # --steps 1
    ({"warmup_steps": 0}, "'warmup_steps=0'"),        # --warmup 0
    ({"batch_size": 1, "width": 4}, "'batch_size=1, width=4'"),  # --set
])
def test_parameters_the_base_does_not_set_are_an_error(tmp_path: Path, base: Path, overrides: dict,
                                                       shown: str) -> None:
    folder = write_run(tmp_path / "r", *sides(lambda r: dataclasses.replace(r, overrides=overrides)))
    code, _, _, comment = run(tmp_path, folder, base)
    w = judged_workload(tmp_path, "tiny")
    assert code == 2 and w["verdict"] == "ERROR", comment
    assert w["reason"].endswith(f"overrides (--set, --steps, --warmup): the base's settings give none, the head "
                                f"side's result was measured with {shown}"), w["reason"]


def test_a_process_start_the_base_does_not_give_is_an_error(tmp_path: Path, base: Path) -> None:
    """A paired gate forks (start = auto): `--start fresh` is the measuring job's choice."""
    forked = write_run(tmp_path / "forked", *sides(lambda r: started(r, "fork")))
    assert run(tmp_path, forked, base)[0] == 1
    fresh = write_run(tmp_path / "fresh", *sides(lambda r: started(r, "fresh")))
    code, _, _, comment = run(tmp_path, fresh, base)
    w = judged_workload(tmp_path, "tiny")
    assert code == 2 and w["verdict"] == "ERROR", comment
    assert "start: the base's settings give fork, the head side's repeat 1 started 'fresh'" in w["reason"]
    assert 'set start = "fresh" in the base\'s [tool.perfgate]' in w["reason"]
    # one side's processes alone
    mixed = write_run(tmp_path / "mixed", {"tiny": started(paired("tiny", scale=SLOW, seed=1), "fork")},
                      {"tiny": started(paired("tiny", seed=2), "fresh")})
    code, _, _, _ = run(tmp_path, mixed, base)
    assert code == 2 and "the base side's repeat 1 started 'fresh'" in judged_workload(tmp_path, "tiny")["reason"]
    # a distributed workload's ranks are started by torch.distributed.run: fresh in any design
    ranks = write_run(tmp_path / "ranks", *sides(lambda r: dataclasses.replace(
        started(r, "fresh"), params={**r.params, "nproc_per_node": 2})))
    assert run(tmp_path, ranks, base)[0] == 1
    # the base's own start = "fresh": the fresh run is the design, the forked one is not
    settings(base, 'start = "fresh"\n')
    assert run(tmp_path, fresh, base)[0] == 1
    assert run(tmp_path, forked, base)[0] == 2


def test_a_repeat_that_does_not_record_its_process_start_is_refused(tmp_path: Path, base: Path) -> None:
    """Measured with `--start fresh` where the base's paired gate forks, then `process_start`
    deleted from every repeat so that the start check has nothing to read: refused in one
    line naming the file and the repeat (result schema 3 requires it; an older file is
    upgraded only where the start can be known, a script's or a distributed workload's)."""
    forked = write_run(tmp_path / "forked", *sides(lambda r: started(r, "fork")))
    assert run(tmp_path, forked, base)[0] == 1  # the control

    def deleted(data: dict) -> None:
        for r in data["repeats"]:
            del r["torch_settings"]["process_start"]

    folder = write_run(tmp_path / "r", *sides(lambda r: started(r, "fresh")))
    for path in (folder / "tiny.json", folder / "base" / "tiny.json"):
        edit_result(path, deleted)
    code, _, err, _ = run(tmp_path, folder, base)
    assert code == 2 and err.count("\n") == 1, err
    assert "tiny.json: repeats[0].torch_settings: missing process_start (fork or fresh)" in err
    # written as an older schema, the migration cannot know it either
    for path in (folder / "tiny.json", folder / "base" / "tiny.json"):
        edit_result(path, lambda data: data.update(schema_version=2))
    code, _, err, _ = run(tmp_path, folder, base)
    assert code == 2 and err.count("\n") == 1, err
    assert "tiny.json: repeats[0].torch_settings: no process_start (fork or fresh)" in err
    assert "nothing in it tells how the process started: measure it again" in err
    # a result built in memory without it (never read from a file) is refused by the design check
    from perfgate.gate.judge import base_settings, design_problem

    bare = dataclasses.replace(paired("tiny"), repeats=tuple(
        dataclasses.replace(r, torch_settings={"num_threads": 2}) for r in paired("tiny").repeats))
    assert design_problem(bare, "head", base_settings(base), paired=True) == (
        "start: the base's settings give fork, the head side's repeat 1 records no process_start (every repeat "
        "records how its process started)")


# --- cases 3 and 4: a script result is the base's scripts entry -----------------------------

SCRIPT = "script-train"
ENTRY = f'scripts = [{{ path = "train.py", args = ["--model", "big"], name = "{SCRIPT}" }}]\n'


def script_result(path: str, args: str, *, scale: float = 1.0, seed: int = 0) -> RunResult:
    result = started(paired(SCRIPT, scale=scale, seed=seed), "fresh")  # a script's process starts fresh
    return dataclasses.replace(result, workload_source=f"script:{path} sha256:{'a' * 64}",
                               params={"batch_size": 1, "steps": 10, ARGS_PARAM: args})


def script_run(tmp_path: Path, name: str, path: str, args: str) -> Path:
    head = {SCRIPT: script_result(path, args, scale=SLOW, seed=1), "tiny": paired("tiny", seed=3)}
    side = {SCRIPT: script_result(path, args, seed=2), "tiny": paired("tiny", seed=4)}
    return write_run(tmp_path / name, head, side)


@pytest.fixture
def script_base(base: Path) -> Path:
    settings(base, ENTRY)
    (base / "train.py").write_text("print('big')\n")
    (base / "small.py").write_text("print('small')\n")
    (base / "train_old.py").write_text("print('old')\n")
    return base


def test_script_results_of_another_file_or_other_arguments_are_an_error(tmp_path: Path, script_base: Path) -> None:
    """`ci --measure-only --script small.py --name script-train -- --model tiny` on both sides."""
    code, _, _, comment = run(tmp_path, script_run(tmp_path, "control", "train.py", "--model big"), script_base)
    assert code == 1 and judged_workload(tmp_path, SCRIPT)["verdict"] == "REGRESSION", comment
    code, _, _, comment = run(tmp_path, script_run(tmp_path, "other", "small.py", "--model tiny"), script_base)
    w = judged_workload(tmp_path, SCRIPT)
    assert code == 2 and w["verdict"] == "ERROR", comment
    assert w["reason"].endswith("script path: the base's [tool.perfgate] scripts entry names 'train.py', the head "
                                "side's result ran 'small.py'"), w["reason"]
    code, _, _, comment = run(tmp_path, script_run(tmp_path, "args", "train.py", "--model tiny"), script_base)
    w = judged_workload(tmp_path, SCRIPT)
    assert code == 2 and w["reason"].endswith("script arguments: the base's [tool.perfgate] scripts entry gives "
                                              "'--model big', the head side's result ran with '--model tiny'")


def test_a_script_result_in_a_workloads_place_or_a_workload_in_a_scripts_is_an_error(
        tmp_path: Path, script_base: Path) -> None:
    as_workload = write_run(tmp_path / "r",
                            {SCRIPT: paired(SCRIPT, scale=SLOW, seed=1), "tiny": paired("tiny", seed=3)},
                            {SCRIPT: paired(SCRIPT, seed=2), "tiny": paired("tiny", seed=4)})
    code, _, _, _ = run(tmp_path, as_workload, script_base)
    assert code == 2 and "runs 'script-train' as the script 'train.py --model big', but the head side's result is " \
                         "of a workload" in judged_workload(tmp_path, SCRIPT)["reason"]
    tiny_script = dataclasses.replace(paired("tiny", scale=SLOW, seed=1), workload_source="script:train.py")
    folder = write_run(tmp_path / "s", {SCRIPT: script_result("train.py", "--model big", seed=1), "tiny": tiny_script},
                       {SCRIPT: script_result("train.py", "--model big", seed=2), "tiny": paired("tiny", seed=4)})
    code, _, _, _ = run(tmp_path, folder, script_base)
    assert code == 2 and "scripts names no script 'tiny'" in judged_workload(tmp_path, "tiny")["reason"]


def test_a_script_the_base_selects_by_name_alone_is_no_entry_to_match(tmp_path: Path, base: Path) -> None:
    """`workloads = ["script-train"]` names a result, not a file and its arguments: any script
    could fill it."""
    settings(base, f'workloads = ["tiny", "{SCRIPT}"]\n')
    code, _, _, _ = run(tmp_path, script_run(tmp_path, "r", "small.py", "--model tiny"), base)
    assert code == 2 and "scripts names no script 'script-train'" in judged_workload(tmp_path, SCRIPT)["reason"]


def test_a_script_linked_to_another_file_is_refused(tmp_path: Path, script_base: Path) -> None:
    """The pull request makes train.py a link to train_old.py: the measuring harness resolved
    the link, so its results name train_old.py on both sides, and the merged train.py was
    measured on neither. The judge holds them to the entry's own path; a link in the base
    checkout itself is refused in one line."""
    code, _, _, comment = run(tmp_path, script_run(tmp_path, "linked", "train_old.py", "--model big"), script_base)
    assert code == 2 and "the head side's result ran 'train_old.py'" in judged_workload(tmp_path, SCRIPT)["reason"]
    (script_base / "train.py").unlink()
    (script_base / "train.py").symlink_to("train_old.py")
    code, _, err, _ = run(tmp_path, script_run(tmp_path, "control", "train.py", "--model big"), script_base)
    assert code == 2 and err.count("\n") == 1, err
    assert "[tool.perfgate] scripts: train.py: train.py is a symbolic link in the base checkout" in err


def test_the_measuring_side_runs_no_script_through_a_link(tmp_path: Path) -> None:
    from perfgate.gate.side_jobs import base_script_job
    from perfgate.gate.worktree import BaseTree
    from perfgate.measure.script_job import script_job, script_of

    head, base_root = tmp_path / "head", tmp_path / "base"
    for tree in (head, base_root):
        (tree / "sub").mkdir(parents=True)
        (tree / "train_old.py").write_text("print('old')\n")
        (tree / "sub" / "train.py").write_text("print('new')\n")
    (head / "train.py").symlink_to("train_old.py")
    (head / "linked").symlink_to("sub")
    for path in ("train.py", "linked/train.py"):
        with pytest.raises(UsageError) as info:
            script_of(path, (), head, given="[tool.perfgate] scripts:")
        assert f"{path.split('/')[0]} is a symbolic link" in str(info.value) and "\n" not in str(info.value)
    # the base side: base_root / the entry's path, refused when a part of it is a link there
    job = script_job(script_of("sub/train.py", ("--x",), head), "cpu", {}, name="script-train")
    tree = BaseTree("b" * 40, base_root, head)
    base_job = base_script_job(job, tree, project_dir=head, assignments={}, device="cpu")
    assert base_job is not None and base_job.script is not None
    assert base_job.script.path == (base_root / "sub" / "train.py").resolve() and base_job.script.args == ("--x",)
    (base_root / "sub" / "train.py").unlink()
    (base_root / "sub" / "train.py").symlink_to("../train_old.py")
    with pytest.raises(UsageError) as info:
        base_script_job(job, tree, project_dir=head, assignments={}, device="cpu")
    assert "sub/train.py is a symbolic link" in str(info.value) and "bbbbbbb" in str(info.value)


# --- case 7: the base's workloads and device ----------------------------------------------

def test_bundled_reference_workloads_the_base_does_not_select_are_refused(tmp_path: Path, base: Path) -> None:
    ref = "resnet18-cifar10"
    head, side = sides(lambda r: r)
    head[ref], side[ref] = paired(ref, seed=5), paired(ref, seed=6)
    folder = write_run(tmp_path / "r", head, side)
    code, _, err, _ = run(tmp_path, folder, base)
    assert code == 2 and f"results for perfgate's reference workloads {ref}, which the base does not select" in err
    settings(base, f'workloads = ["tiny", "{ref}"]\n')  # selected by the base: judged
    code, _, _, comment = run(tmp_path, folder, base)
    assert code == 1 and ref in comment


def test_base_results_for_a_workload_only_the_pull_request_defines_are_refused(tmp_path: Path, base: Path) -> None:
    head, side = sides(lambda r: r)
    head["new"], side["new"] = paired("new", seed=5), paired("new", seed=6)
    head_files = tmp_path / "head-files"
    define_workloads(head_files, "tiny", "new")
    changed = tmp_path / "changed.tsv"
    changed.write_text("modified\tworkloads/defined.py\n")
    folder = write_run(tmp_path / "r", head, side)
    code, _, err, _ = run(tmp_path, folder, base, "--head-files", str(head_files), "--changed-files", str(changed))
    assert code == 2 and "base-side results for workloads the base tree does not define: new" in err
    del side["new"]  # the control: measured on the head alone, as a new workload is
    folder = write_run(tmp_path / "c", head, side)
    code, _, _, comment = run(tmp_path, folder, base, "--head-files", str(head_files), "--changed-files", str(changed))
    assert code == 1 and "has no workload 'new' measured" in comment


def test_without_a_device_setting_the_bases_baselines_choose_the_device(tmp_path: Path, base: Path) -> None:
    """The base gates tiny and other on the CPU (their baselines); the pull request breaks
    other and measures tiny on a GPU, where the base has no baseline: other would not be due."""
    record(base, "tiny")
    record(base, "other")
    cpu = write_run(tmp_path / "cpu", {"tiny": paired("tiny", seed=1)}, {"tiny": paired("tiny", seed=2)})
    code, _, _, comment = run(tmp_path, cpu, base)
    assert code == 2 and "no result for 'other'" in comment  # the control
    on_gpu = {"environment": CUDA_ENV}

    def gpu(result: RunResult) -> RunResult:
        return dataclasses.replace(result, device="cuda", **on_gpu)

    cuda = write_run(tmp_path / "cuda", {"tiny": gpu(paired("tiny", seed=1))}, {"tiny": gpu(paired("tiny", seed=2))},
                     RunManifest(design="paired", device="cuda", workloads=("tiny",), pr_number=7, head_sha=HEAD_SHA,
                                 base_sha=BASE_SHA))
    code, _, err, _ = run(tmp_path, cuda, base)
    assert code == 2 and "the base gates on cpu (its baselines' device; its [tool.perfgate] sets none), but the " \
                         "results were measured on cuda" in err, err


def test_baselines_of_both_devices_and_no_device_setting_are_refused(tmp_path: Path, base: Path) -> None:
    from perfgate.store.baselines import save_baseline, updated_baseline

    record(base, "tiny")
    gpu_baseline = updated_baseline(None, make_result("tiny", env=CUDA_ENV), "test", append=True)
    save_baseline(gpu_baseline, base / "baselines")  # type: ignore[arg-type]
    code, _, err, _ = run(tmp_path, control(tmp_path), base)
    assert code == 2 and "holds baselines for both cpu and cuda" in err
    settings(base, 'device = "cpu"\n')
    assert run(tmp_path, control(tmp_path, "again"), base)[0] == 1


# --- version skew and interrupted runs -----------------------------------------------------

@pytest.mark.parametrize(("rule", "shown"), [(None, "not recorded"), (DECISION_RULE + 1, str(DECISION_RULE + 1))])
def test_results_measured_by_another_decision_rule_are_refused_naming_both(tmp_path: Path, base: Path,
                                                                            rule: int | None, shown: str) -> None:
    folder = control(tmp_path)
    assert run(tmp_path, folder, base)[0] == 1
    rewrite_manifest(folder, decision_rule=rule, perfgate_version="0.0.9")
    code, _, err, _ = run(tmp_path, folder, base)
    assert code == 2 and err.count("\n") == 1, err
    assert (f"measured by perfgate '0.0.9' (decision rule {shown}); this judge is perfgate 0.1.0 (decision rule "
            f"{DECISION_RULE})") in err


PR = {"pr_number": 7, "head_sha": HEAD_SHA, "base_sha": BASE_SHA}


def test_the_shards_of_one_run_share_one_decision_rule(tmp_path: Path, base: Path) -> None:
    define_workloads(base, "other", file="workloads/other.py")
    one = write_run(tmp_path / "one", {"tiny": paired("tiny", scale=SLOW, seed=1)}, {"tiny": paired("tiny", seed=2)},
                    RunManifest(design="paired", device="cpu", workloads=("tiny",), shard="1/2", **PR))
    two = write_run(tmp_path / "two", {"other": paired("other", seed=3)}, {"other": paired("other", seed=4)},
                    RunManifest(design="paired", device="cpu", workloads=("other",), shard="2/2", **PR))
    assert judge_shards(tmp_path, base, one, two)[0] == 1
    rewrite_manifest(two, decision_rule=DECISION_RULE + 1)
    code, _, err = judge_shards(tmp_path, base, one, two)
    assert code == 2 and f"the shards are not of one run: decision_rule is {DECISION_RULE} in" in err, err


def test_an_interrupted_measuring_job_is_no_verdict(tmp_path: Path, base: Path) -> None:
    folder = control(tmp_path)
    rewrite_manifest(folder, interrupted="SIGTERM")
    code, _, err, _ = run(tmp_path, folder, base)
    assert code == 2 and "interrupted (SIGTERM)" in err
