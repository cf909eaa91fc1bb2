"""What a repeat costs, and where the noise is: fresh processes against forked ones.

Measurements, each printed as numbers (run with nothing else on the machine; quote
medians and ratios from one run):

``components``
    Processes of ``small-cnn`` (benchmarks/workloads/small_cnn.py, about 10 ms a step)
    alternating fresh / forked, each timing W windows of S steps after one warmup. Per start:
    the variance components (between groups of four processes, between processes, between
    windows, between steps; ``perfgate.analysis.stats.components``), the wall time per
    process and its part outside the timed windows. Forked processes come from a template
    replaced every four processes, as a paired gate replaces it every block; fresh ones are
    grouped by four the same way, so the two designs are alike.

``efficiency``
    Fixed paired gates (``--blocks N --max-blocks N``: one look) of a workload against its
    own commit, once with ``--start fresh`` and once with ``--start fork``, in a scratch git
    repository: each gate's wall time, its share inside timed windows and its verdict.

``aa``
    A/A paired gates with the sequential driver and a wall-time budget: the verdicts (0 false
    REGRESSION expected), the PASS share and the blocks used.

``defaults``
    Real paired gates with nothing on the command line but ``--against HEAD~1``, in a scratch
    repository whose ``[tool.perfgate]`` is the table ``perfgate init`` writes (budget 10 min)
    with ``--delta``: ``--aa`` gates whose head commit only adds a comment, ``--slow`` gates whose
    head busy-waits ``--spin-ms`` a step in forward. Per gate: the verdict, blocks, wall time and
    share inside timed windows; for the A/A gates the spread of log ratio / its se (1 when the
    gates' own intervals hold the spread between gates).

``aa``
    Paired A/A gates of the small CNN against its own copy. With one fixed look (``--blocks N
    --max-blocks N``) it also sends each gate's t through its own df and the normal quantile:
    over gates of unchanged code these are N(0, 1) when the intervals hold every source of
    spread, so the sum of their squares against χ² on the gates' count tests for a spread
    between gates that the within-gate intervals leave out.

``budget``
    From a ``components --out`` file: per start, the blocks a fixed budget (10 minutes) holds at
    the measured cost per process, and the smallest δ at which 80% of simulated A/A gates
    (through the real driver, at the measured components, one workload, ``max_blocks`` out of
    the way) PASS within it.

    python benchmarks/repeat_cost.py components --processes 12 --windows 12 --steps 20
    python benchmarks/repeat_cost.py efficiency --workload small-cnn --blocks 12
    python benchmarks/repeat_cost.py efficiency --workload resnet18-cifar10 --blocks 12
    python benchmarks/repeat_cost.py aa --gates 20 --budget none --blocks 6 --max-blocks 6 --no-counters
    python benchmarks/repeat_cost.py aa --gates 10 --budget none --blocks 10 --max-blocks 10 --windows 3 --no-counters
    python benchmarks/repeat_cost.py budget components.json --minutes 10
    python benchmarks/repeat_cost.py defaults --aa 10 --slow 5 --delta 0.05 --out defaults.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

from scipy import stats

HERE = Path(__file__).resolve().parent
SMALL = HERE / "workloads" / "small_cnn.py"


def _load(windows: int, steps: int):
    from perfgate.model.job import Job
    from perfgate.store.discovery import discover

    workload = discover([SMALL], project_dir=HERE).get("small-cnn")
    params = workload.resolve("cpu", {"steps": str(steps)})
    return Job(workload, params, {"steps": steps})


def cmd_components(args: argparse.Namespace) -> int:
    from perfgate.analysis.stats.components import Window, components
    from perfgate.measure.runner import run_one
    from perfgate.measure.template import Starter
    from perfgate.model.result import repeat_from_dict

    job = _load(args.windows, args.steps)
    cache = Path(tempfile.mkdtemp(prefix="perfgate-bench-cache-"))
    rows: dict[str, list[dict]] = {"fresh": [], "fork": []}
    with Starter("fork", renew_every=4) as fork, Starter("fresh") as fresh:
        starters = {"fresh": fresh, "fork": fork}
        for i in range(2 * args.processes):
            mode = ("fresh", "fork")[i % 2] if (i // 2) % 2 == 0 else ("fork", "fresh")[i % 2]  # ABBA pairs
            began = time.perf_counter()
            response = run_one(job, "cpu", i, cache, (None, None), 600.0, True, starter=starters[mode],
                               windows=args.windows)
            wall = time.perf_counter() - began
            repeat = repeat_from_dict(response["repeat"], "repeat")
            rows[mode].append({"wall_s": wall, "timed_s": repeat.window_s, "window_ms": list(repeat.window_step_ms),
                               "steps_ms": list(repeat.phases_ms["step"])})
            print(f"{mode:5} process {len(rows[mode]):2}: {wall:5.2f} s wall, {repeat.window_s:5.2f} s timed, "
                  f"{repeat.per_step_ms['step']:.2f} ms/step", flush=True)
        templates = fork.templates
    print()
    out = {"processes": args.processes, "windows": args.windows, "steps": args.steps, "templates": templates,
           "load_before": args.load, "load_after": os.getloadavg()[0], "modes": {}}
    for mode, processes in rows.items():
        windows = []
        for p, row in enumerate(processes):
            n = args.steps
            for w, value in enumerate(row["window_ms"]):
                windows.append(Window(p // 4, p, w, n, value, tuple(row["steps_ms"][w * n:(w + 1) * n])))
        c = components(windows)
        walls = [r["wall_s"] for r in processes]
        outside = [r["wall_s"] - r["timed_s"] for r in processes]
        first = [math.log(r["window_ms"][0]) for r in processes]
        sd_first = (sum((x - sum(first) / len(first)) ** 2 for x in first) / (len(first) - 1)) ** 0.5
        out["modes"][mode] = {"components": c.describe(), "block_sd": c.block_sd, "process_sd": c.process_sd,
                              "window_sd": c.window_sd, "step_sd": c.step_sd,
                              "wall_s_median": median(walls), "outside_s_median": median(outside),
                              "timed_share": sum(r["timed_s"] for r in processes) / sum(walls),
                              "first_window_log_sd": sd_first, "rows": processes}
        print(f"{mode}: {c.describe()}")
        print(f"  per process: {median(walls):.2f} s wall (median), {median(outside):.2f} s outside the windows; "
              f"timed share {out['modes'][mode]['timed_share']:.0%}; sd of log first window "
              f"{sd_first:.1%} over {len(first)} processes")
    print(f"templates started: {templates}; load average before {args.load:.2f}, after {os.getloadavg()[0]:.2f}")
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1))
    shutil.rmtree(cache, ignore_errors=True)
    return 0


def _scratch(workload: str) -> Path:
    repo = Path(tempfile.mkdtemp(prefix="perfgate-bench-")) / "repo"
    repo.mkdir()
    (repo / "workloads").mkdir()
    shutil.copy(SMALL, repo / "workloads" / "small_cnn.py")
    (repo / "pyproject.toml").write_text(f'[tool.perfgate]\nworkloads = ["{workload}"]\nworkloads_path = '
                                         f'["workloads"]\ndevice = "cpu"\n')
    for command in (["init", "-q"], ["add", "."], ["-c", "user.name=bench", "-c", "user.email=bench@localhost",
                                                   "commit", "-q", "-m", "scratch"]):
        subprocess.run(["git", *command], cwd=repo, check=True)
    return repo


def _gate(repo: Path, extra: list[str], tag: str, against: str = "HEAD") -> dict:
    """One ``perfgate gate --against AGAINST`` in ``repo``; its report and results beside the
    repository, so its tree stays clean for the next gate."""
    report = repo.parent / f"{repo.name}-{tag}.json"
    began = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "perfgate", "gate", "--against", against, "--json", str(report),
                           "--out", str(repo.parent / f"{repo.name}-results-{tag}"), "-q", *extra],
                          cwd=repo, capture_output=True, text=True)
    wall = time.perf_counter() - began
    if not report.exists():
        print(proc.stdout[-2000:], proc.stderr[-2000:], sep="\n")
        raise SystemExit(f"gate {tag} wrote no report (exit {proc.returncode})")
    data = json.loads(report.read_text())
    workload = data["workloads"][0]
    estimate = (workload.get("step") or {}).get("estimate")
    return {"exit": proc.returncode, "wall_s": wall, "measuring": data["measuring"], "verdict": workload["verdict"],
            "blocks": data["look_count"], "reason": workload.get("reason", ""), "estimate": estimate,
            "ratio": (estimate or {}).get("ratio")}


def cmd_efficiency(args: argparse.Namespace) -> int:
    repo = _scratch(args.workload)
    try:
        fixed = ["--blocks", str(args.blocks), "--max-blocks", str(args.blocks), "--windows", str(args.windows)]
        for start in args.starts:
            g = _gate(repo, [*fixed, "--start", start], start)
            m = g["measuring"]
            print(f"{args.workload} {start:5}: {args.blocks} blocks in {g['wall_s']:.1f} s (gate's own "
                  f"{m['wall_s']:.1f} s), {m['share']:.1%} inside timed windows, {m['processes']} processes, "
                  f"{m['templates']} templates; {g['verdict']} {g['reason'][:120]}", flush=True)
    finally:
        shutil.rmtree(repo.parent, ignore_errors=True)  # the reports and results too
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


def cmd_aa(args: argparse.Namespace) -> int:
    repo = _scratch("small-cnn")
    verdicts: dict[str, int] = {}
    blocks, shares, normal = [], [], []
    try:
        for i in range(args.gates):
            g = _gate(repo, [*(["--budget", args.budget] if args.budget != "none" else []),
                             *(["--max-blocks", str(args.max_blocks)] if args.max_blocks else []), "--start", args.start, "--windows", str(args.windows),
                             "--delta", str(args.delta), "--blocks", str(args.blocks),
                             *(["--no-counters"] if args.no_counters else [])],
                      f"aa{i}")
            verdicts[g["verdict"]] = verdicts.get(g["verdict"], 0) + 1
            est = g["estimate"] or {}
            if est.get("se_log") and est.get("df"):
                # the gate's t on its own df, sent through the normal quantile: N(0, 1) over gates of
                # unchanged code when the intervals hold every source of spread (one fixed look)
                normal.append(float(stats.norm.ppf(stats.t.cdf(math.log(est["ratio"]) / est["se_log"], est["df"]))))
            blocks.append(g["blocks"])
            shares.append(g["measuring"]["share"])
            print(f"gate {i + 1:2}: {g['verdict']:12} {g['blocks']:2} blocks, {g['wall_s']:.0f} s, "
                  f"{g['measuring']['share']:.0%} timed; {g['reason'][:110]}", flush=True)
    finally:
        shutil.rmtree(repo.parent, ignore_errors=True)  # the reports and results too
    print(f"\n{args.gates} A/A gates (start {args.start}, windows {args.windows}, delta {args.delta}, budget "
          f"{args.budget}): " + ", ".join(f"{k} {v}" for k, v in sorted(verdicts.items())))
    print(f"blocks median {median(blocks)}, timed share median {median(shares):.0%}; "
          f"load average after {os.getloadavg()[0]:.2f}")
    if len(normal) >= 3:
        mean = sum(normal) / len(normal)
        sd = (sum((x - mean) ** 2 for x in normal) / (len(normal) - 1)) ** 0.5
        q = sum(x * x for x in normal)
        print(f"t on its df as a normal quantile over {len(normal)} gates: mean {mean:+.2f}, sd {sd:.2f}; sum of "
              f"squares {q:.1f} on {len(normal)} df, P(chi2 >= it) = {stats.chi2.sf(q, len(normal)):.3f} (small: "
              "a spread between gates that the intervals leave out; meaningful with one fixed look only)")
    return 0


TEMPLATE = HERE.parent / "perfgate" / "adapters" / "templates" / "tool_perfgate.toml"


def _init_scratch(delta: float) -> Path:
    """A scratch repository whose settings are what ``perfgate init`` writes (its template),
    with the small CNN as the workload, the CPU as the device and ``delta`` as the smallest
    slowdown that fails; one commit."""
    repo = Path(tempfile.mkdtemp(prefix="perfgate-bench-")) / "repo"
    repo.mkdir()
    (repo / "workloads").mkdir()
    shutil.copy(SMALL, repo / "workloads" / "small_cnn.py")
    table = TEMPLATE.read_text()
    table = table.replace('workloads = ["my-model"]', 'workloads = ["small-cnn"]\nworkloads_path = ["workloads"]'
                          '\ndevice = "cpu"')
    table = re.sub(r"(?m)^delta = [0-9.]+", f"delta = {delta}", table)
    (repo / "pyproject.toml").write_text(table)
    _commit(repo, "scratch")
    return repo


def _commit(repo: Path, message: str) -> None:
    for command in (["init", "-q"] if not (repo / ".git").exists() else [], ["add", "."],
                    ["-c", "user.name=bench", "-c", "user.email=bench@localhost", "commit", "-q", "-m", message]):
        if command:
            subprocess.run(["git", *command], cwd=repo, check=True)


def _head_commit(repo: Path, tag: str, spin_ms: float) -> None:
    """The head: the base plus a comment (an A/A gate), or a busy-wait of ``spin_ms`` in forward."""
    path = repo / "workloads" / "small_cnn.py"
    subprocess.run(["git", "checkout", "-q", "--detach", "main" if _has(repo, "main") else "master"], cwd=repo,
                   check=True)
    text = path.read_text()
    if spin_ms:
        text = text.replace('os.environ.get("SMALL_CNN_SPIN_MS", "0")', f'"{spin_ms}"')
    path.write_text(text + f"\n# {tag}\n")
    _commit(repo, tag)


def _has(repo: Path, branch: str) -> bool:
    return subprocess.run(["git", "rev-parse", "--verify", "-q", branch], cwd=repo, capture_output=True).returncode == 0


def cmd_defaults(args: argparse.Namespace) -> int:
    """Real paired gates with the settings ``perfgate init`` writes (budget 10 min), head one
    commit on the base: a comment (A/A) or a busy-wait in forward; nothing on the command line
    but ``--against``."""
    repo = _init_scratch(args.delta)
    # windows = "auto" designs from the runner's earlier gates: these gates start from none (a
    # fresh design folder beside the scratch repository), so the first times 3 windows and each
    # later one designs from the gates before it
    os.environ["PERFGATE_DESIGN_DIR"] = str(repo.parent / "design")
    rows = []
    try:
        plan = [("aa", 0.0)] * args.aa + [("slow", args.spin_ms)] * args.slow
        for i, (kind, spin) in enumerate(plan):
            tag = f"{kind}{i}"
            _head_commit(repo, tag, spin)
            g = _gate(repo, [], tag, against="HEAD~1")
            rows.append({"kind": kind, **g})
            print(f"gate {i + 1:2} {kind:4}: {g['verdict']:12} {g['blocks']:3} blocks, {g['wall_s']:4.0f} s, "
                  f"{g['measuring']['windows']} windows, {g['measuring']['share']:.0%} timed; {g['reason'][:150]}",
                  flush=True)
    finally:
        shutil.rmtree(repo.parent, ignore_errors=True)  # the reports and results too
    for kind in ("aa", "slow"):
        these = [r for r in rows if r["kind"] == kind]
        if not these:
            continue
        counts: dict[str, int] = {}
        for r in these:
            counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
        print(f"\n{kind}: {len(these)} gates: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
        print(f"  blocks median {median(r['blocks'] for r in these)}, wall median "
              f"{median(r['wall_s'] for r in these):.0f} s, timed share median "
              f"{median(r['measuring']['share'] for r in these):.0%} (min {min(r['measuring']['share'] for r in these):.0%})")
        z = [math.log(r["estimate"]["ratio"]) / r["estimate"]["se_log"] for r in these
             if r["estimate"] and r["estimate"].get("se_log")]
        if kind == "aa" and len(z) >= 3:
            mean = sum(z) / len(z)
            sd = (sum((x - mean) ** 2 for x in z) / (len(z) - 1)) ** 0.5
            print(f"  z = log ratio / its se over {len(z)} gates: mean {mean:+.2f}, sd {sd:.2f} (1 when the "
                  f"intervals hold the between-gate spread), sum of z^2 {sum(x * x for x in z):.1f} on {len(z)} df")
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))
    return 0


def cmd_budget(args: argparse.Namespace) -> int:
    from perfgate.analysis.decide import GateConfig
    from perfgate.analysis.simulate import Noise, Scenario, simulate
    from perfgate.model.verdict import Verdict

    data = json.loads(Path(args.components).read_text())
    steps, measured_windows = data["steps"], data["windows"]
    for mode, m in data["modes"].items():
        for windows in args.windows:
            # a process's cost at this many windows: what is outside the windows, plus the windows
            step_s = median(v for r in m["rows"] for v in r["steps_ms"]) / 1e3
            # the mean, not the median: a template's start is in the wall time of the first process it forks
            outside = sum(r["wall_s"] - r["timed_s"] for r in m["rows"]) / len(m["rows"])
            block_s = 4 * (outside + windows * steps * step_s)
            budget_blocks = int(args.minutes * 60 // block_s)
            if budget_blocks < 2:
                print(f"{mode}, {windows} windows: {args.minutes:g} min hold no two blocks ({block_s:.1f} s each)")
                continue
            noise = Noise(run_sd_log=m["process_sd"] or 0.0, ar=0.0, drift_per_process=0.0, day_sd_log=0.0,
                          outlier_rate=0.0, throttle_rate=0.0)
            found = None
            for delta in args.deltas:
                config = GateConfig(delta=delta, max_blocks=max(budget_blocks + 1, 6))
                scenario = Scenario(noise, 0.0, paired=True, blocks=min(6, budget_blocks), budget_blocks=budget_blocks,
                                    workloads=1, steps=min(steps, 32),
                                    step_sd=(m["step_sd"] or 0.0) * math.sqrt(min(steps, 32) / steps),
                                    windows=windows, window_sd=m["window_sd"] or 0.0)
                cell = simulate(scenario, args.gates, config, seed=0)
                if cell.share(Verdict.PASS) >= 0.8:
                    found = (delta, cell.share(Verdict.PASS))
                    break
            where = (f"delta {found[0]:.0%} ({found[1]:.0%} PASS of {args.gates})" if found
                     else f"none up to {args.deltas[-1]:.0%}")
            print(f"{mode:5}, {windows:2} windows: {block_s:5.1f} s a block, {budget_blocks:3} blocks in "
                  f"{args.minutes:g} min; 80% of A/A gates PASS from {where}", flush=True)
    print(f"(components measured with {measured_windows} windows of {steps} steps; process sd fresh "
          f"{data['modes']['fresh']['process_sd']}, fork {data['modes']['fork']['process_sd']})")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    p = sub.add_parser("defaults", help="real paired gates with perfgate init's settings")
    p.add_argument("--aa", type=int, default=10, help="A/A gates (a comment-only head commit)")
    p.add_argument("--slow", type=int, default=5, help="gates whose head busy-waits in forward")
    p.add_argument("--spin-ms", type=float, default=1.3, help="the busy-wait in forward, ms a step")
    p.add_argument("--delta", type=float, default=0.05)
    p.add_argument("--out", help="every gate's row as JSON")
    p.set_defaults(func=cmd_defaults)
    p = sub.add_parser("components")
    p.add_argument("--processes", type=int, default=12, help="processes per start (default 12)")
    p.add_argument("--windows", type=int, default=12)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--out", help="write every value as JSON here")
    p.set_defaults(func=cmd_components)
    p = sub.add_parser("efficiency")
    p.add_argument("--workload", default="small-cnn")
    p.add_argument("--blocks", type=int, default=12)
    p.add_argument("--windows", type=int, default=1)
    p.add_argument("--starts", nargs="+", default=["fresh", "fork"])
    p.set_defaults(func=cmd_efficiency)
    p = sub.add_parser("aa")
    p.add_argument("--gates", type=int, default=20)
    p.add_argument("--budget", default="75s", help='a wall-time budget, or "none"')
    p.add_argument("--start", default="fork")
    p.add_argument("--windows", type=int, default=1)
    p.add_argument("--delta", type=float, default=0.1)
    p.add_argument("--no-counters", action="store_true", help="no counted run per side (timing only)")
    p.add_argument("--blocks", type=int, default=6, help="blocks at the first look (default 6)")
    p.add_argument("--max-blocks", type=int, default=0, help="the most blocks (default: the gate's)")
    p.set_defaults(func=cmd_aa)
    p = sub.add_parser("budget")
    p.add_argument("components", help="a components --out file")
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--gates", type=int, default=200)
    p.add_argument("--windows", type=int, nargs="+", default=[1, 4, 12])
    p.add_argument("--deltas", type=float, nargs="+",
                   default=[0.01, 0.015, 0.02, 0.03, 0.04, 0.05, 0.06, 0.08, 0.10, 0.12, 0.15, 0.2, 0.25, 0.3])
    p.set_defaults(func=cmd_budget)
    args = parser.parse_args()
    args.load = os.getloadavg()[0]
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
