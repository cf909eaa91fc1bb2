"""Sharding: ``--shard I/N`` takes a deterministic share of the selected workloads, and
``perfgate judge DIR...`` judges the shards' folders as one run, Holm over all their
workloads (not shard by shard)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import shutil
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from factories import define_workloads, make_result

from perfgate.adapters import ci
from perfgate.adapters.cli import build_parser, main
from perfgate.adapters.judge_cli import add_parser as add_judge_parser
from perfgate.adapters.judge_cli import run_judge
from perfgate.adapters.options import settings_of
from perfgate.adapters.selection import jobs_of
from perfgate.analysis.stats.multiplicity import holm_adjusted
from perfgate.gate.config import Settings
from perfgate.model.errors import UsageError
from perfgate.model.manifest import MANIFEST_NAME, RunManifest
from perfgate.model.result import RunResult
from perfgate.model.shard import MAX_SHARDS, Shard, parse_shard, second_look_alpha, split
from perfgate.store.jsonfile import write_json_atomic
from perfgate.store.results import save_result

HEAD_SHA, BASE_SHA = "c" * 40, "b" * 40

# --- the split ------------------------------------------------------------------------------


def test_the_split_is_round_robin_over_the_sorted_names() -> None:
    names = ["resnet", "alpha", "mlp", "bert", "gpt", "vit", "zeta"]
    # sorted: alpha bert gpt mlp resnet vit zeta; position modulo 3 is the share's I - 1
    assert split(names, 3) == (("alpha", "mlp", "zeta"), ("bert", "resnet"), ("gpt", "vit"))
    assert Shard(2, 3).take(reversed(names)) == ("bert", "resnet")  # the order given does not matter
    assert Shard(1, 1).take(names) == tuple(sorted(names))


@pytest.mark.parametrize("count", [1, 2, 3, 5, 8, 13])
def test_every_workload_falls_in_exactly_one_share(count: int) -> None:
    rng = random.Random(count)
    names = {f"w{rng.randrange(10**6)}-{i}" for i in range(rng.randrange(0, 30))}
    shares = split(names, count)
    assert len(shares) == count
    assert sorted(n for share in shares for n in share) == sorted(names)
    sizes = [len(share) for share in shares]
    assert max(sizes) - min(sizes) <= 1  # balanced; a share may be empty
    shuffled = list(names)
    rng.shuffle(shuffled)
    assert split(shuffled, count) == shares


def test_a_share_can_be_empty() -> None:
    assert split(["a", "b"], 4) == (("a",), ("b",), (), ())


@pytest.mark.slow
def test_the_split_does_not_depend_on_the_hash_seed() -> None:
    code = ("from perfgate.model.shard import split\n"
            "print(split({f'w{i}' for i in range(40)}, 3))\n")
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60,
                           env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("0", "1", "12345")}
    assert len(outs) == 1


@pytest.mark.parametrize("text", ["3/2", "0/2", "a/b", "1/0", "", "1", "1/2/3", "-1/2", "1/2x", "1.0/2",
                                  f"1/{MAX_SHARDS + 1}", "9" * 50 + "/2"])
def test_a_malformed_shard_is_a_one_line_usage_error(text: str) -> None:
    with pytest.raises(UsageError) as info:
        parse_shard(text)
    message = info.value.message
    assert message.startswith("--shard ") and "\n" not in message and len(message) < 200


def test_a_shard_parses() -> None:
    assert parse_shard("2/3") == Shard(2, 3) and str(Shard(2, 3)) == "2/3"
    assert parse_shard(f"{MAX_SHARDS}/{MAX_SHARDS}") == Shard(MAX_SHARDS, MAX_SHARDS)


# --- where a shard stops its workloads -------------------------------------------------------


def test_a_shard_decides_nothing_the_combined_holm_would_not() -> None:
    """At second_look_alpha, a hypothesis the shard's own Holm rejects is rejected by Holm
    over all shards too, whatever the other shards' p-values; so the shard leaves undecided
    (and measures on) every workload the combined judge leaves undecided."""
    rng = random.Random(7)
    alpha = 0.01
    too_lax = 0
    for _ in range(3000):
        total = rng.randrange(2, 12)
        own = rng.randrange(1, total + 1)
        p = [10 ** rng.uniform(-5, 0) for _ in range(total)]
        full = holm_adjusted(p)
        mine = holm_adjusted(p[:own])
        tight = second_look_alpha(alpha, own, total)
        for i in range(own):
            if mine[i] <= tight:
                assert full[i] <= alpha, (p, own)
            too_lax += mine[i] <= alpha < full[i]
    assert too_lax > 0  # the shard's Holm at α alone would decide some the combined judge does not
    assert second_look_alpha(alpha, 3, 3) == alpha
    with pytest.raises(ValueError):
        second_look_alpha(alpha, 0, 3)


def test_the_measuring_shard_plans_its_looks_at_the_tighter_alpha() -> None:
    settings = Settings()
    tight = ci._shard_settings(settings, ["a"], ["a", "b", "c"])
    assert tight.gate.alpha == pytest.approx(settings.gate.alpha / 3)
    assert tight.gate.max_blocks == settings.gate.max_blocks  # the looks stay the run's
    assert ci._shard_settings(settings, ["a", "b", "c"], ["a", "b", "c"]) is settings
    # every look of the shard stops workloads for the combined judge, however many there are
    fewer = dataclasses.replace(settings, gate=dataclasses.replace(settings.gate, max_blocks=8))
    assert ci._shard_settings(fewer, ["a"], ["a", "b"]).gate.alpha == pytest.approx(settings.gate.alpha / 2)
    # Gated phases are hypotheses of the family too.
    phased = dataclasses.replace(settings, gate=dataclasses.replace(settings.gate, gate_phases=("data_wait",)))
    assert ci._shard_settings(phased, ["a"], ["a", "b", "c"]).gate.alpha == pytest.approx(settings.gate.alpha / 5)


# --- the share on the command line ------------------------------------------------------------


def parsed(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


def add_other(tiny_path: Path) -> None:
    """A second tiny workload, ``other``, beside ``tiny``."""
    text = (tiny_path / "tiny_workloads.py").read_text()
    (tiny_path / "other.py").write_text(text.replace('TINY = Workload(\n    name="tiny"',
                                                     'OTHER = Workload(\n    name="other"'))


def test_run_gate_and_ci_take_a_share_of_the_selection(tmp_path: Path, tiny_path: Path, monkeypatch,
                                                       capsys) -> None:
    monkeypatch.chdir(tmp_path)
    add_other(tiny_path)
    common = ("--device", "cpu", "--workloads-path", str(tiny_path))
    args = parsed("run", *common)
    _, every = jobs_of(args, settings_of(args))
    names = [job.workload.name for job in every]
    assert {"tiny", "other"} <= set(names)
    shares = []
    for command in ("run", "gate"):
        shares = []
        for i in (1, 2, 3):
            args = parsed(command, *common, "--shard", f"{i}/3")
            _, jobs = jobs_of(args, settings_of(args))
            shares.append(tuple(job.workload.name for job in jobs))
        assert shares == [tuple(n for n in names if n in share) for share in split(names, 3)]
    err = capsys.readouterr().err
    assert f"perfgate: shard 1/3: {', '.join(shares[0])} ({len(shares[0])} of {len(names)} selected workloads)" in err
    # A share with none: said on stderr, even with --quiet, and nothing to measure.
    args = parsed("run", *common, "tiny", "other", "--shard", "3/3", "--quiet")
    assert jobs_of(args, settings_of(args))[1] == []
    assert capsys.readouterr().err == ("perfgate: shard 3/3: none of the 2 selected workload(s) falls to this share; "
                                       "nothing to measure\n")


def test_only_run_gate_and_ci_have_the_option(capsys) -> None:
    for command in ("run", "gate", "ci"):
        extra = ["--base-dir", "base"] if command == "ci" else []
        assert parsed(command, *extra, "--shard", "1/2").shard == "1/2"
    for command in ("rebaseline", "calibrate", "trace", "tune-loader", "selftest"):
        with pytest.raises(SystemExit):
            parsed(command, "--shard=1/2", *(["--reason", "r"] if command == "rebaseline" else []))
        assert capsys.readouterr().err.endswith("unrecognized arguments: --shard=1/2\n")


@pytest.mark.parametrize("value", ["3/2", "0/2", "a/b"])
def test_a_bad_shard_exits_2_with_one_line(tmp_path: Path, monkeypatch, capsys, value: str) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--device", "cpu", "--shard", value]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("perfgate: error: --shard ")


@pytest.mark.slow  # measure() asks git for the commit, even with nothing to measure
def test_an_empty_share_measures_nothing_and_exits_0(tmp_path: Path, tiny_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    code = main(["run", "tiny", "--device", "cpu", "--workloads-path", str(tiny_path), "--shard", "2/2",
                 "--out", str(out)])
    assert code == 0
    assert "none of the 1 selected workload(s) falls to this share; nothing to measure" in capsys.readouterr().err
    assert not out.exists() or not list(out.iterdir())


def ci_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="perfgate")
    ci.add_parser(parser.add_subparsers())
    return parser.parse_args(["ci", "--base-dir", "base", *argv])


def test_ci_judging_results_on_disk_takes_no_share(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"no measuring option \(--shard\)"):
        ci.judge(ci_args("--results", str(tmp_path), "--shard", "1/2"), lambda cli: Settings())


def test_an_empty_share_of_ci_names_the_device_and_no_workload(tmp_path: Path, tiny_path: Path, monkeypatch,
                                                               capsys) -> None:
    monkeypatch.chdir(tmp_path)
    args = ci_args("tiny", "--device", "cpu", "--workloads-path", str(tiny_path), "--design", "stored",
                   "--measure-only", "--shard", "2/2")
    judged = ci.judge(args, lambda cli: Settings(repeats=2))
    assert judged.names == () and judged.outcome.comparisons == () and judged.outcome.exit_code == 0
    assert judged.settings.device == "cpu"  # what run.json says, as the other shards' do
    assert "nothing to measure" in capsys.readouterr().err
    # run.json names the share, so the judge can tell when one is missing.
    pr = ci.PullRequest(number=7, head_sha=HEAD_SHA, head_ref="f", head_repo="o/r", base_sha=BASE_SHA, base_ref="main")
    manifest = ci.manifest_for(judged, pr, "stored", None)
    assert manifest.shard == "2/2" and manifest.to_dict()["shard"] == "2/2"


# --- the combined judge -----------------------------------------------------------------------

BLOCKS = 4


def paired(name: str, scales: list[float], seed: int) -> RunResult:
    """A result of ``len(scales)`` ABBA blocks, two repeats each, block b scaled by ``scales[b]``."""
    result = make_result(name, repeats=2 * len(scales), repeat_scales=[s for s in scales for _ in (0, 1)], seed=seed)
    return dataclasses.replace(result, repeats=tuple(dataclasses.replace(r, block=i // 2)
                                                     for i, r in enumerate(result.repeats)))


def measurements(blocks: int = BLOCKS) -> tuple[dict[str, RunResult], dict[str, RunResult]]:
    """Four workloads: ``a`` about 10% slower with noisy blocks (p about 0.002), the others unchanged."""
    noisy = [1.10 * (1 + 0.028 * x) for x in (1, -1, 0.5, -0.5)]
    scales = {"a": noisy * (blocks // BLOCKS), "b": [1.0] * blocks, "c": [1.0] * blocks, "d": [1.0] * blocks}
    head = {n: paired(n, s, seed=i + 1) for i, (n, s) in enumerate(scales.items())}
    base = {n: paired(n, [1.0] * blocks, seed=i + 11) for i, n in enumerate(scales)}
    return head, base


def write_folder(folder: Path, names: tuple[str, ...], head: dict[str, RunResult], base: dict[str, RunResult],
                 **manifest: object) -> Path:
    folder.mkdir(parents=True)
    for name in names:
        save_result(head[name], folder / f"{name}.json")
        save_result(base[name], folder / "base" / f"{name}.json")
    fields = {"design": "paired", "device": "cpu", "workloads": names, "pr_number": 7, "head_sha": HEAD_SHA,
              "base_sha": BASE_SHA, "base_ref": "main", **manifest}
    write_json_atomic(folder / MANIFEST_NAME, RunManifest(**fields).to_dict())  # type: ignore[arg-type]
    return folder


@pytest.fixture
def base(tmp_path: Path) -> Path:
    folder = tmp_path / "base-checkout"
    folder.mkdir()
    # one look: the first is the last (max_blocks = blocks)
    (folder / "pyproject.toml").write_text(f'[tool.perfgate]\nbaselines = "baselines"\nblocks = {BLOCKS}\nwindows = 1\nbudget = "none"\n'
                                           f'max_blocks = {BLOCKS}\n')
    define_workloads(folder, "a", "b", "c", "d")
    return folder


def judge(tmp_path: Path, base: Path, *folders: Path) -> tuple[int, dict, str]:
    """``perfgate judge FOLDER... --base-dir BASE``: (exit code, report.json, stderr)."""
    parser = argparse.ArgumentParser(prog="perfgate")
    add_judge_parser(parser.add_subparsers())
    artifacts = tmp_path / "judged"
    shutil.rmtree(artifacts, ignore_errors=True)
    args = parser.parse_args(["judge", *map(str, folders), "--base-dir", str(base), "--artifacts", str(artifacts),
                              "--expect-head-sha", HEAD_SHA, "--expect-pr", "7"])
    err = StringIO()
    code = run_judge(args, {}, StringIO(), err)
    report = artifacts / "report.json"
    return code, json.loads(report.read_text()) if report.exists() else {}, err.getvalue()


def verdicts(report: dict) -> dict[str, tuple[str, str]]:
    return {w["workload"]: (w["verdict"], w["reason"]) for w in report["workloads"]}


def test_the_shards_judged_together_are_the_single_run(tmp_path: Path, base: Path) -> None:
    """Holm runs over all four workloads: ``a`` (p about 0.003 for a slowdown of more than
    δ/2) is not significant in a family of four workloads, eight entries (each workload's time
    per step and median step; first step α/8 = 0.00125)."""
    head, base_side = measurements()
    names = tuple(head)
    shard1, shard2 = split(names, 2)
    assert (shard1, shard2) == (("a", "c"), ("b", "d"))
    single = write_folder(tmp_path / "single", names, head, base_side)
    one = write_folder(tmp_path / "shard-1", shard1, head, base_side, clocks="locked:1245")
    two = write_folder(tmp_path / "shard-2", shard2, head, base_side, clocks="locked:1245")

    code_single, single_report, _ = judge(tmp_path, base, single)
    code, combined, err = judge(tmp_path, base, one, two)
    assert err == ""
    assert (code, verdicts(combined)) == (code_single, verdicts(single_report))
    assert combined["headline"] == single_report["headline"]
    assert verdicts(combined)["a"][0] == "TOO_NOISY" and code == 2  # undecided, and +6% not ruled out
    assert ("not significant (p=0.0032 > its Holm step's level 0.0013 for a slowdown of more than 1.5%, one look)"
            in verdicts(combined)["a"][1])
    # One shard judged alone: the workloads it lacks are ERRORs and still count in the Holm
    # family (a name not judged at a look counts as decided there), so ``a`` is judged at the
    # whole gate's level, never at its shard's (where p=0.002 < α/4 would have failed it).
    code_alone, alone, _ = judge(tmp_path, base, one)
    assert code_alone == 2 and verdicts(alone)["b"][0] == verdicts(alone)["d"][0] == "ERROR"
    assert verdicts(alone)["a"] == verdicts(combined)["a"]
    # The folders' order does not change the verdicts.
    assert verdicts(judge(tmp_path, base, two, one)[1]) == verdicts(combined)


def test_the_looks_are_replayed_over_all_shards(tmp_path: Path, base: Path) -> None:
    """With the default looks (one after every block up to max_blocks), the shards hold the
    blocks measured; the combined judge replays every look as a single run's, Holm over all
    the shards' workloads at each: b, c and d pass at the first look (4 blocks), a is
    decided at the fourth (7 blocks)."""
    (base / "pyproject.toml").write_text(f'[tool.perfgate]\nbaselines = "baselines"\nblocks = {BLOCKS}\nwindows = 1\nbudget = "none"\n')
    head, base_side = measurements(2 * BLOCKS)
    single = write_folder(tmp_path / "single", tuple(head), head, base_side)
    shard1, shard2 = split(head, 2)
    one = write_folder(tmp_path / "one", shard1, head, base_side)
    two = write_folder(tmp_path / "two", shard2, head, base_side)
    code_single, single_report, _ = judge(tmp_path, base, single)
    code, combined, _ = judge(tmp_path, base, one, two)
    assert (combined["look"], combined["look_count"]) == (single_report["look"], single_report["look_count"]) == (4, 7)
    assert (code, verdicts(combined)) == (code_single, verdicts(single_report))
    progress = {w["workload"]: w["progress"] for w in combined["workloads"]}
    assert progress == {"a": "decided after 7 blocks (look 4 of 27)", "b": "decided after 4 blocks (look 1 of 27)",
                        "c": "decided after 4 blocks (look 1 of 27)", "d": "decided after 4 blocks (look 1 of 27)"}
    # A shard that measured a no further than the first look, where it was undecided, and
    # the base sets no budget: a short run, an ERROR, never a stop at a budget nobody set
    # (nor judged past what was measured).
    head_short, base_short = measurements(BLOCKS)
    shutil.rmtree(one)
    one = write_folder(tmp_path / "one", shard1, {**head, "a": head_short["a"]}, {**base_side, "a": base_short["a"]})
    code, combined, _ = judge(tmp_path, base, one, two)
    verdict, reason = verdicts(combined)["a"]
    assert code == 2 and verdict == "ERROR"
    assert reason.startswith("a: the results hold 4 block(s), the base's settings plan looks up to 30 and the "
                             "boundary had not decided at 4; the base sets no budget"), reason
    # Fewer blocks than the first look: an error, never a pass.
    shutil.rmtree(one)
    three = {"a": paired("a", [1.10, 0.97, 1.12], seed=1)}, {"a": paired("a", [1.0] * 3, seed=11)}
    one = write_folder(tmp_path / "one", shard1, {**head, **three[0]}, {**base_side, **three[1]})
    code, combined, _ = judge(tmp_path, base, one, two)
    assert code == 2 and "the first look was not measured whole: 3 block(s) of its 4" in verdicts(combined)["a"][1]


def test_a_share_with_no_workload_joins_the_run(tmp_path: Path, base: Path) -> None:
    head, base_side = measurements()
    single = write_folder(tmp_path / "single", tuple(head), head, base_side)
    empty = write_folder(tmp_path / "empty", (), head, base_side)
    assert judge(tmp_path, base, single, empty)[:2] == judge(tmp_path, base, single)[:2]


def test_a_workload_in_two_shards_is_a_one_line_error(tmp_path: Path, base: Path) -> None:
    head, base_side = measurements()
    one = write_folder(tmp_path / "one", ("a", "b"), head, base_side)
    two = write_folder(tmp_path / "two", ("b", "c"), head, base_side)
    code, _, err = judge(tmp_path, base, one, two)
    assert code == 2
    assert err == f"perfgate: error: b: in both {one} and {two}; each workload belongs to one shard\n"
    # Named in a manifest only (a workload that failed there) counts too.
    shutil.rmtree(two)
    two = write_folder(tmp_path / "two", ("c",), head, base_side, workloads=("c", "a"), errors={"a": "boom"})
    code, _, err = judge(tmp_path, base, one, two)
    assert code == 2 and err.startswith(f"perfgate: error: a: in both {one} and {two}")


def test_shards_of_different_runs_are_refused(tmp_path: Path, base: Path) -> None:
    head, base_side = measurements()
    one = write_folder(tmp_path / "one", ("a", "c"), head, base_side)
    two = write_folder(tmp_path / "two", ("b", "d"), head, base_side, base_sha="e" * 40)
    code, _, err = judge(tmp_path, base, one, two)
    assert code == 2 and err.count("\n") == 1
    assert f"base_sha is '{BASE_SHA}' in {one} and '{'e' * 40}' in {two}" in err
    (two / MANIFEST_NAME).unlink()
    code, _, err = judge(tmp_path, base, one, two)
    assert code == 2 and f"{two}: no run.json, but {one} has one" in err
    code, _, err = judge(tmp_path, base, one, tmp_path / "one")
    assert code == 2 and "given twice" in err and err.count("\n") == 1
    code, _, err = judge(tmp_path, base, one, tmp_path / "missing")
    assert code == 2 and err.count("\n") == 1 and "missing" in err


def test_every_shard_is_read_as_untrusted(tmp_path: Path, base: Path) -> None:
    head, base_side = measurements()
    one = write_folder(tmp_path / "one", ("a", "c"), head, base_side)
    two = write_folder(tmp_path / "two", ("b", "d"), head, base_side)
    (two / "b.json").write_text((two / "b.json").read_text().replace('"workload": "b"', '"workload": "../b"'))
    code, _, err = judge(tmp_path, base, one, two)
    assert code == 2 and err.count("\n") == 1 and str(two / "b.json") in err


def test_the_shards_failures_and_clocks_are_all_reported(tmp_path: Path, base: Path) -> None:
    head, base_side = measurements()
    one = write_folder(tmp_path / "one", ("a", "c"), head, base_side, clocks="locked:1245")
    two = write_folder(tmp_path / "two", ("b", "d"), head, base_side, clocks="unlocked")
    code, _, _ = judge(tmp_path, base, one, two)
    comment = (tmp_path / "judged" / "comment.md").read_text()
    assert "one: locked:1245; two: unlocked" in comment
    assert "outside the measuring jobs, their 2 shards as one run." in comment
    shutil.rmtree(two)
    two = write_folder(tmp_path / "two", (), head, base_side, failure="no GPU")
    code, _, err = judge(tmp_path, base, one, two)
    assert code == 2 and f"could not measure: {two}: no GPU" in err


def test_an_interrupted_shard_makes_the_run_no_verdict_whichever_shard_it_is(tmp_path: Path, base: Path) -> None:
    head, base_side = measurements()
    one = write_folder(tmp_path / "one", ("a", "c"), head, base_side)
    two = write_folder(tmp_path / "two", ("b", "d"), head, base_side, interrupted="SIGTERM")
    for folders in ((one, two), (two, one)):
        code, _, err = judge(tmp_path, base, *folders)
        assert code == 2 and "interrupted (SIGTERM)" in err, err


# --- end to end: two shards of `perfgate run` on one machine -------------------------------------


@pytest.mark.slow
def test_two_shards_of_perfgate_run_judged_together(tmp_path: Path, tiny_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    add_other(tiny_path)
    (tmp_path / "pyproject.toml").write_text('[tool.perfgate]\nrepeats = 2\nmax_blocks = 2\n'
                                             'workloads = ["other", "tiny"]\n')
    # forked from a template (one torch import a shard), no telemetry: the sharding is the subject here
    measure = ("--device", "cpu", "--workloads-path", str(tiny_path), "--steps", "3", "--warmup", "1", "--quiet",
               "--start", "fork", "--no-telemetry")
    for i in (1, 2):
        assert main(["run", *measure, "--shard", f"{i}/2", "--out", f"shard-{i}"]) == 0, capsys.readouterr().err
    assert sorted(p.name for p in Path("shard-1").iterdir()) == ["other.json"]
    assert sorted(p.name for p in Path("shard-2").iterdir()) == ["tiny.json"]
    single = tmp_path / "single"
    single.mkdir()
    for i in (1, 2):
        for path in Path(f"shard-{i}").iterdir():
            shutil.copy(path, single / path.name)
    assert main(["rebaseline", "--from-results", str(single), "--reason", "test", "--workloads-path",
                 str(tiny_path)]) == 0
    capsys.readouterr()
    outcomes = []
    for folders in ([str(single)], ["shard-1", "shard-2"]):
        code = main(["judge", *folders, "--base-dir", ".", "--design", "stored", "--artifacts", "judged"])
        report = json.loads(Path("judged/report.json").read_text())
        outcomes.append((code, verdicts(report)))
    assert outcomes[0] == outcomes[1]
    assert set(outcomes[0][1]) == {"other", "tiny"}
    # perfgate compare takes the shards' folders too, as one family.
    compared = []
    for folders in ([str(single)], ["shard-1", "shard-2"]):
        code = main(["compare", *(x for f in folders for x in ("--results", f)), "--json", "compared.json"])
        report = json.loads(Path("compared.json").read_text())
        compared.append((code, verdicts(report)))
    assert compared[0] == compared[1] and set(compared[0][1]) == {"other", "tiny"}
    capsys.readouterr()
    assert main(["compare", "--results", str(single), "--results", "shard-1"]) == 2
    assert "other: given twice (in " in capsys.readouterr().err


def test_the_judge_wants_every_share_the_manifests_name(tmp_path: Path, base: Path) -> None:
    """Each measuring job writes its share into run.json: judging fewer than all N shares
    (Holm over part of the run) is one line and exit 2, as are a share given twice and
    shares of different splits."""
    head, base_side = measurements()
    shard1, shard2 = split(tuple(head), 2)
    one = write_folder(tmp_path / "s1", shard1, head, base_side, shard="1/2")
    two = write_folder(tmp_path / "s2", shard2, head, base_side, shard="2/2")
    code, combined, err = judge(tmp_path, base, one, two)
    assert err == "" and code == 2 and set(verdicts(combined)) == set(head)  # one TOO_NOISY: an error, not a share
    code, _, err = judge(tmp_path, base, one)
    assert code == 2 and err.count("\n") == 1
    assert "shard 2 of 2 missing (given: 1/2)" in err
    again = write_folder(tmp_path / "s1-again", (), head, base_side, shard="1/2")
    code, _, err = judge(tmp_path, base, one, again)
    assert code == 2 and "shard 1/2 twice" in err
    third = write_folder(tmp_path / "s3", (), head, base_side, shard="3/3")
    code, _, err = judge(tmp_path, base, one, two, third)
    assert code == 2 and "split it into 2 and 3 shards" in err
    plain = write_folder(tmp_path / "plain", (), head, base_side)
    code, _, err = judge(tmp_path, base, one, two, plain)
    assert code == 2 and "is not a shard" in err
    bad = write_folder(tmp_path / "bad", (), head, base_side, shard="1/2")
    manifest = json.loads((bad / MANIFEST_NAME).read_text())
    (bad / MANIFEST_NAME).write_text(json.dumps({**manifest, "shard": "2/1"}))
    code, _, err = judge(tmp_path, base, one, bad)
    assert code == 2 and err.count("\n") == 1 and "shard" in err
