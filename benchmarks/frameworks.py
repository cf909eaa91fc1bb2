"""Lightning and the Hugging Face Trainer in script mode: perfgate's step against the script's own.

The scripts are the recipes of docs/frameworks.md (tests/test_frameworks.py holds the same
text): a small Lightning CNN (fp32, ``accumulate_grad_batches=2``, ``bf16-mixed``) and a
tiny BERT trained by the Hugging Face Trainer (accumulation 1 and 2), all on the CPU with
one intra-op thread.

1. The step table. Per case, ``--repeats`` rounds, each a fresh process of each kind, in
   alternating order (own, perfgate; then perfgate, own): the script run plainly under a
   runner that only records the end of each outermost optimizer step (torch's global step
   hooks, the boundary perfgate uses), and ``perfgate run --script`` with one repeat. Each
   takes ``--warmup`` steps, then the median of the next ``--steps`` steps. Printed: the
   median over rounds of each, their ratio (perfgate / own; within 2% is the issue's
   criterion), and what perfgate recorded (phases, batches and passes per step, clipping
   and scheduler calls, precision).

2. The booking. Lightning fp32 (the same size) with a ``--busy-ms`` busy-wait first in ``training_step``
   and without it, ``--repeats`` perfgate repeats each: the change in each phase's median.
   Lightning runs ``training_step`` inside ``optimizer.step(closure)``: the wait must move
   forward, not optimizer.

3. With ``--paired``: the same busy-wait as a commit in a scratch repository, paired-gated
   against the commit before it (``perfgate gate --against HEAD~1 --script``, default
   settings): the verdict, each phase's change and flag, the gate's wall time.

4. With ``--in-process ROUNDS``: the hooks' cost per step, without the noise of fresh
   processes. In one process per case, the script runs ``2 * ROUNDS`` times in ABBA order
   (plain, hooked; hooked, plain; ...), under perfgate's hooks every other time (installed
   around the run, as a repeat's child installs them) and plainly otherwise. Both are timed
   by the same runner hook at the end of each outermost optimizer step, the ``--steps``
   after ``--warmup``. Printed: the median of each, and the median of the rounds' ratios
   (hooked / plain) with a 95% interval from the rounds' log ratios (a t interval): the
   share of the step the hooks cost, the 2% criterion checked without process-to-process
   noise. ``--without call,to`` leaves those hooks out of the hooked runs (a cost that
   follows a hook shrinks without it).

5. With ``--tight-loop ROUNDS``: the tiny BERT's forward and backward alone, in a tight loop,
   plainly and under the hooks (all, or without the module-call, ``.to`` or backward hooks):
   the cost per pass in µs, with less around it to vary.

    .venv/bin/python benchmarks/frameworks.py [--repeats N] [--warmup N] [--steps N] [--busy-ms MS]
                                              [--only lightning|hf] [--no-booking] [--paired]
                                              [--in-process ROUNDS] [--without HOOK,...] [--case TEXT]
                                              [--tight-loop ROUNDS] [--no-table]

Needs the frameworks extra (``bash scripts/setup.sh`` installs it).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from test_frameworks import HF_SCRIPT, LIGHTNING_SCRIPT  # noqa: E402  (the docs' recipes)

ROWS = ("data_wait", "h2d", "forward", "backward", "optimizer", "residual", "step")

STEP_MARKS = r'''
torch.manual_seed(0)
torch.set_num_threads(1)
marks, depth = [], [0]


class Done(BaseException):
    pass


def pre(*_):
    depth[0] += 1


def post(*_):
    depth[0] -= 1
    if depth[0] == 0:
        marks.append(time.perf_counter())
        if len(marks) >= warmup + steps:
            raise Done


register_optimizer_step_pre_hook(pre)
register_optimizer_step_post_hook(post)
'''
"""The runners' shared clock (``warmup`` and ``steps`` set before it): the end of each
outermost optimizer step appended to ``marks``, and ``Done`` raised after enough."""

OWN_RUNNER = r'''
"""Run a script as __main__, recording the end of each outermost optimizer step; stop after enough."""
import json, runpy, sys, time

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

warmup, steps, out, script = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
''' + STEP_MARKS + r'''sys.argv = [script, *sys.argv[5:]]
try:
    runpy.run_path(script, run_name="__main__")
except Done:
    pass
window = marks[warmup - 1 : warmup + steps]
with open(out, "w") as handle:
    json.dump([(b - a) * 1e3 for a, b in zip(window, window[1:])], handle)
'''


IN_PROCESS_RUNNER = r'''
"""Run a script as __main__ 2 * ROUNDS times in one process, ABBA, every other time under
perfgate's hooks; print the measured steps of each run (ms) as JSON lines."""
import json, runpy, sys, time

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from perfgate.measure.timeline import HostTimeline
from perfgate.measure.script_hooks import ScriptHooks
from perfgate.measure.script_patches import installed

rounds, warmup, steps, without, script = (int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]),
                                          [w for w in sys.argv[4].split(",") if w], sys.argv[5])
args = sys.argv[6:]
''' + STEP_MARKS + r'''from torch.utils.data import DataLoader
from torch.utils.data.dataloader import _BaseDataLoaderIter

# What --without takes back out after the hooks are installed: (owner, attribute, original).
ORIGINAL = {
    "call": [(torch.nn.Module, "__call__", torch.nn.Module.__call__)],
    "to": [(torch.Tensor, "to", torch.Tensor.to)],
    "loader": [(_BaseDataLoaderIter, "__next__", _BaseDataLoaderIter.__next__),
               (DataLoader, "__iter__", DataLoader.__iter__)],
    "backward": [(torch.Tensor, "backward", torch.Tensor.backward), (torch.autograd, "backward", torch.autograd.backward)],
}


def once(hooked):
    marks.clear()
    depth[0] = 0
    sys.argv = [script, *args]
    # the window never closes: the hooks time every step, as in a repeat's window
    hooks = ScriptHooks(HostTimeline(warmup + steps + 10), warmup_steps=1, steps=warmup + steps + 5,
                        device_type="cpu")
    try:
        if hooked:
            with installed(hooks):
                for name in without:  # restored when the hooks are taken out
                    for owner, attribute, original in ORIGINAL[name]:
                        setattr(owner, attribute, original)
                runpy.run_path(script, run_name="__main__")
        else:
            runpy.run_path(script, run_name="__main__")
    except Done:
        pass
    window = marks[warmup - 1 : warmup + steps]
    return [(b - a) * 1e3 for a, b in zip(window, window[1:])]


once(False)  # the first run imports the framework: untimed
for r in range(rounds):
    for hooked in ((False, True) if r % 2 == 0 else (True, False)):
        print(json.dumps({"hooked": hooked, "steps_ms": once(hooked)}), flush=True)
'''


@dataclass(frozen=True)
class Case:
    label: str
    text: str
    file: str
    args: tuple[str, ...]


SIZE = ("--width", "64", "--image", "32")
"""The Lightning CNN's size here: steps of about 18 ms on the 2-core development machine (the
tests run it at its default size, steps of about 1.5 ms, where the hooks' cost per step is a
larger share)."""


def cases(tmp: Path) -> list[Case]:
    hf_out = str(tmp / "hf-out")
    return [
        Case("Lightning, small CNN, fp32", LIGHTNING_SCRIPT, "train_lightning.py", SIZE),
        Case("Lightning, accumulate_grad_batches=2", LIGHTNING_SCRIPT, "train_lightning.py",
             (*SIZE, "--accumulate", "2")),
        Case("Lightning, precision=bf16-mixed", LIGHTNING_SCRIPT, "train_lightning.py",
             (*SIZE, "--precision", "bf16-mixed")),
        Case("HF Trainer, tiny BERT", HF_SCRIPT, "train_hf.py", ("--out", hf_out)),
        Case("HF Trainer, accumulation 2", HF_SCRIPT, "train_hf.py", ("--out", hf_out, "--accumulate", "2")),
    ]


def own_step(path: Path, args: tuple[str, ...], warmup: int, steps: int, tmp: Path) -> float:
    """The script run plainly: the median of its own measured steps (ms)."""
    runner, out = tmp / "own_runner.py", tmp / "own.json"
    runner.write_text(OWN_RUNNER)
    subprocess.run([sys.executable, str(runner), str(warmup), str(steps), str(out), str(path), *args],
                   check=True, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    values = json.loads(out.read_text())
    if len(values) != steps:
        raise SystemExit(f"{path.name} {' '.join(args)}: ran {len(values)} of {steps} measured steps on its own")
    return statistics.median(values)


def perfgate_repeat(path: Path, args: tuple[str, ...], warmup: int, steps: int, tmp: Path) -> dict:
    """One repeat of ``perfgate run --script``: the repeat as the result file holds it."""
    out = tmp / "perfgate-out"
    command = [sys.executable, "-m", "perfgate", "run", "--script", str(path), "--device", "cpu", "--repeats", "1",
               "--warmup", str(warmup), "--steps", str(steps), "--set", "num_threads=1", "--no-telemetry",
               "--out", str(out), "-q", "--", *args]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"perfgate run --script {path.name}: exit {done.returncode}: {done.stderr.strip()}")
    (result,) = out.glob("*.json")
    repeat = json.loads(result.read_text())["repeats"][0]
    result.unlink()
    return repeat


def phase_medians(repeat: dict) -> dict[str, float]:
    series = repeat["phases_ms"]
    medians = {row: statistics.median(series[row]) for row in ROWS if row in series}
    per_step = [series["step"][i] - sum(series[p][i] for p in ROWS[:5]) for i in range(len(series["step"]))]
    medians["residual"] = statistics.median(per_step)
    return medians


def step_table(chosen: list[Case], repeats: int, warmup: int, steps: int, tmp: Path) -> None:
    print(f"perfgate step / the script's own step: {repeats} round(s) per case, each a fresh process of each, "
          f"{warmup} warmup + {steps} measured steps, CPU, 1 thread")
    print(f"  {'script':<38} {'perfgate ms':>11} {'own ms':>8} {'ratio':>6}  recorded by perfgate")
    for case in chosen:
        path = tmp / case.file
        path.write_text(case.text)
        own, mine, repeats_seen = [], [], []
        for i in range(repeats):
            order = ("own", "perfgate") if i % 2 == 0 else ("perfgate", "own")
            for kind in order:
                if kind == "own":
                    own.append(own_step(path, case.args, warmup, steps, tmp))
                else:
                    repeat = perfgate_repeat(path, case.args, warmup, steps, tmp)
                    repeats_seen.append(repeat)
                    mine.append(statistics.median(repeat["phases_ms"]["step"]))
        a, b = statistics.median(mine), statistics.median(own)
        script = repeats_seen[0]["torch_settings"]["script"]
        phases = {row: statistics.median(phase_medians(r)[row] for r in repeats_seen) for row in ROWS[:6]}
        shown = ", ".join(f"{row} {value:.2f}" for row, value in phases.items())
        print(f"  {case.label:<38} {a:11.2f} {b:8.2f} {a / b:6.3f}  {shown}; per step "
              f"{script['batches_per_step']:g} batch(es), {script['forwards_per_step']:g} forward, "
              f"{script['backwards_per_step']:g} backward, {script['grad_clips_per_step']:g} clip, "
              f"{script['lr_scheduler_steps_per_step']:g} scheduler step; {script['precision']} "
              f"(from {script['precision_from']})")


def booking(repeats: int, warmup: int, steps: int, busy_ms: float, tmp: Path) -> None:
    path = tmp / "train_lightning.py"
    path.write_text(LIGHTNING_SCRIPT)
    runs: dict[float, list[dict[str, float]]] = {0.0: [], busy_ms: []}
    for i in range(repeats):
        for wait in ((0.0, busy_ms) if i % 2 == 0 else (busy_ms, 0.0)):
            repeat = perfgate_repeat(path, (*SIZE, "--busy-ms", str(wait)), warmup, steps, tmp)
            runs[wait].append(phase_medians(repeat))
    print(f"\nLightning fp32, a {busy_ms:g} ms busy-wait first in training_step: {repeats} perfgate repeat(s) each, "
          "median ms per step")
    print(f"  {'row':<10} {'without':>8} {'with':>8} {'change':>8}")
    for row in ROWS:
        before = statistics.median(r[row] for r in runs[0.0])
        after = statistics.median(r[row] for r in runs[busy_ms])
        print(f"  {row:<10} {before:8.2f} {after:8.2f} {after - before:+8.2f}")


WITHOUT = ("call", "to", "loader", "backward")
"""The hooks ``--without`` can leave out of the hooked runs (module calls, ``Tensor.to``, the
DataLoader's, backward): to see whether a cost follows a hook."""


def in_process(chosen: list[Case], rounds: int, warmup: int, steps: int, tmp: Path,
               without: tuple[str, ...] = ()) -> None:
    """The hooks' cost per step, in one process per case (see the module's docstring, 4.)."""
    import math

    from scipy import stats

    runner = tmp / "in_process_runner.py"
    runner.write_text(IN_PROCESS_RUNNER)
    print(f"\nthe hooks' cost in one process: {rounds} ABBA round(s) per case, each a plain run and a hooked run of "
          f"{warmup} warmup + {steps} measured steps, CPU, 1 thread"
          + (f"; the hooked runs without the hooks of {', '.join(without)}" if without else ""))
    print(f"  {'script':<38} {'plain ms':>9} {'hooked ms':>9} {'ratio':>6} {'95% interval':>17}  {'cost/step':>10}")
    for case in chosen:
        path = tmp / case.file
        path.write_text(case.text)
        done = subprocess.run([sys.executable, str(runner), str(rounds), str(warmup), str(steps), ",".join(without),
                               str(path), *case.args], cwd=ROOT, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"{case.label}: the in-process runner failed: {done.stderr.strip()[-800:]}")
        runs = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        if len(runs) != 2 * rounds or any(len(r["steps_ms"]) != steps for r in runs):
            raise SystemExit(f"{case.label}: {len(runs)} run(s) of {2 * rounds}, or a run short of {steps} steps")
        plain = [statistics.median(r["steps_ms"]) for r in runs if not r["hooked"]]
        hooked = [statistics.median(r["steps_ms"]) for r in runs if r["hooked"]]
        logs = [math.log(h / p) for h, p in zip(hooked, plain, strict=True)]
        mean = statistics.fmean(logs)
        half = (stats.t.ppf(0.975, len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
                if len(logs) > 1 else math.inf)
        ratio = statistics.median(h / p for h, p in zip(hooked, plain, strict=True))
        cost_us = statistics.median((h - p) * 1e3 for h, p in zip(hooked, plain, strict=True))
        print(f"  {case.label:<38} {statistics.median(plain):9.2f} {statistics.median(hooked):9.2f} {ratio:6.3f} "
              f"[{math.exp(mean - half):.3f}, {math.exp(mean + half):.3f}]  {cost_us:+8.0f} us")


def tight_loop(rounds: int, passes: int = 60) -> None:
    """The hooks' cost per forward and backward pass of the tiny BERT alone (the HF cases'
    model and batch), in a tight loop in this process: plain, then under the hooks with each
    of ``WITHOUT``'s module-call, ``.to`` and backward hooks left out, in ABBA order."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    from perfgate.measure.timeline import HostTimeline
    from perfgate.measure.script_hooks import ScriptHooks
    from perfgate.measure.script_patches import installed

    torch.set_num_threads(1)
    config = BertConfig(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=128, max_position_embeddings=64, num_labels=2)
    model = BertForSequenceClassification(config)
    g = torch.Generator().manual_seed(0)
    batch = {"input_ids": torch.randint(0, 1000, (16, 32), generator=g), "labels": torch.randint(0, 2, (16,), generator=g)}
    original = {"call": [(torch.nn.Module, "__call__", torch.nn.Module.__call__)],
                "to": [(torch.Tensor, "to", torch.Tensor.to)],
                "backward": [(torch.Tensor, "backward", torch.Tensor.backward),
                             (torch.autograd, "backward", torch.autograd.backward)]}

    def timed(n: int) -> float:
        values = []
        for _ in range(n):
            t0 = time.perf_counter()
            model(**batch).loss.backward()
            values.append(time.perf_counter() - t0)
        return statistics.median(values) * 1e6

    variants: list[tuple[str, ...] | None] = [None, (), ("call",), ("to",), ("backward",), ("call", "to", "backward")]
    medians: dict[tuple[str, ...] | None, list[float]] = {v: [] for v in variants}
    timed(passes)
    for r in range(rounds):
        for v in variants if r % 2 == 0 else variants[::-1]:
            if v is None:
                medians[v].append(timed(passes))
                continue
            with installed(ScriptHooks(HostTimeline(10**5), warmup_steps=1, steps=10**5, device_type="cpu")):
                for name in v:
                    for owner, attribute, value in original[name]:
                        setattr(owner, attribute, value)
                medians[v].append(timed(passes))
    plain = statistics.median(medians[None])
    print(f"\nthe tiny BERT's forward and backward alone, {rounds} ABBA round(s) of {passes} passes each, CPU, 1 thread "
          "(median of the rounds' medians)")
    for v in variants:
        value = statistics.median(medians[v])
        label = "plain" if v is None else "hooks" + (f" without {', '.join(v)}" if v else ", all")
        print(f"  {label:<34} {value:8.0f} us  {value - plain:+6.0f} us")


def paired(busy_ms: float, tmp: Path) -> None:
    """``perfgate gate --against HEAD~1 --script train_lightning.py``: a scratch repository whose
    head commit adds the busy-wait first in ``training_step``; the gate's own sequential looks."""
    repo = tmp / "paired"
    repo.mkdir()
    script = repo / "train_lightning.py"
    script.write_text(LIGHTNING_SCRIPT)
    (repo / ".gitignore").write_text("perfgate-results/\n")
    env = {"GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@example.invalid", "GIT_COMMITTER_NAME": "b",
           "GIT_COMMITTER_EMAIL": "b@example.invalid", "PATH": "/usr/bin:/bin"}

    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, env=env)

    git("init", "-q")
    git("add", "-A")
    git("commit", "-qm", "base")
    default = 'parser.add_argument("--busy-ms", type=float, default=0.0)'
    script.write_text(LIGHTNING_SCRIPT.replace(default, default.replace("0.0", f"{busy_ms:g}")))
    git("commit", "-qam", "a busy-wait first in training_step")
    command = [sys.executable, "-m", "perfgate", "gate", "--against", "HEAD~1", "--script", "train_lightning.py",
               "--device", "cpu", "--set", "num_threads=1", "--json", "report.json", "-q", "--", *SIZE]
    began = time.perf_counter()
    done = subprocess.run(command, cwd=repo, capture_output=True, text=True)
    wall = time.perf_counter() - began
    report = json.loads((repo / "report.json").read_text())
    (workload,) = report["workloads"]
    print(f"\nLightning fp32, paired gate of a {busy_ms:g} ms busy-wait first in training_step against the commit "
          f"without it (perfgate gate --against HEAD~1 --script, default settings): exit {done.returncode}, "
          f"{wall:.0f} s wall")
    print(f"  {workload['headline']}")
    for row in workload["phases"]:
        estimate = row.get("estimate") or {}
        ratio = estimate.get("ratio")
        change = f"{ratio - 1:+.1%}" if ratio is not None else "—"
        before, after = row.get("baseline_per_step_ms"), row.get("current_per_step_ms")
        shown = (f"{before:8.3f} -> {after:8.3f}" if before is not None and after is not None else f"{'—':>20}")
        print(f"  {row['phase']:<10} {shown} ms/step  {change:>9}  {'flagged' if row.get('flagged') else ''}")
    print(f"  measuring: {report['measuring']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=6)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--busy-ms", type=float, default=6.5)
    parser.add_argument("--only", choices=("lightning", "hf"))
    parser.add_argument("--no-booking", action="store_true", help="print only the step table")
    parser.add_argument("--paired", action="store_true", help="also the paired gate of the busy-wait (3.)")
    parser.add_argument("--in-process", type=int, default=0, metavar="ROUNDS",
                        help="also the hooks' cost in one process, ROUNDS ABBA rounds per case (4.)")
    parser.add_argument("--no-table", action="store_true", help="leave out the step table (1.)")
    parser.add_argument("--without", default="", metavar="HOOK[,HOOK]",
                        help=f"with --in-process: hooked runs without these hooks ({', '.join(WITHOUT)})")
    parser.add_argument("--tight-loop", type=int, default=0, metavar="ROUNDS",
                        help="also the hooks' cost per forward and backward of the tiny BERT alone (5.)")
    parser.add_argument("--case", default="", metavar="TEXT", help="only the cases whose label holds TEXT")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        chosen = [c for c in cases(tmp) if (args.only is None or c.file == f"train_{args.only}.py")
                  and args.case in c.label]
        without = tuple(w for w in args.without.split(",") if w)
        if set(without) - set(WITHOUT):
            parser.error(f"--without: one of {', '.join(WITHOUT)}")
        if not args.no_table:
            step_table(chosen, args.repeats, args.warmup, args.steps, tmp)
        if args.in_process:
            in_process(chosen, args.in_process, args.warmup, args.steps, tmp, without)
        if args.tight_loop:
            tight_loop(args.tight_loop)
        if not args.no_booking and args.only != "hf":
            booking(args.repeats, args.warmup, args.steps, args.busy_ms, tmp)
        if args.paired and args.only != "hf":
            paired(args.busy_ms, tmp)


if __name__ == "__main__":
    main()
