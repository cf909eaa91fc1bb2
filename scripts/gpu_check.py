"""The assertions of ``scripts/gpu-check.sh``: each step's readings against what they must be.

    python scripts/gpu_check.py fork-probe
    python scripts/gpu_check.py gate [--warmup N] [--steps N] [--max-blocks N] [--budget-s S]
    python scripts/gpu_check.py windows RESULTS_DIR WINDOWS STEPS
    python scripts/gpu_check.py stall RESULTS_DIR
    python scripts/gpu_check.py write-script PATH
    python scripts/gpu_check.py script RESULTS_DIR REPORT_DIR persistent|non-persistent
    python scripts/gpu_check.py commands FILE      (dry run: every perfgate command line parses)
    python scripts/gpu_check.py self-test          (dry run: every check against good and bad readings)

Each step prints what it read, then one last line, ``PASS <step>: ...`` (exit 0) or ``FAIL
<step>: <every failed assertion>`` (exit 1). The checks on result files are plain functions of
the repeat dicts, so ``self-test`` runs them on a CPU against readings that must pass and
readings that must fail. Needs torch and perfgate installed (not the network).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from statistics import median
from typing import Any

PHASES = ("data_wait", "h2d", "forward", "backward", "optimizer")
RATIO = (0.95, 1.02)
"""Σ device steps over the window's wall time: below or above is the CLOCK-MISMATCH label."""
DATA_WAIT_SLACK_MS = 0.5
"""The exposed data wait (device) may exceed the host's wait in ``next`` by at most this."""
RESIDUAL_MEDIAN_MS = 1.0
STALL_MIN_HOST_WAIT_MS = 1.0
"""With sample_delay_ms the host must have waited for data, or the stall step stalled nothing."""
GATE_SIZE = 0.10
"""The injected slowdown of the gate step: 10% of the probe's step, into forward."""


def finish(step: str, failures: Sequence[str], summary: str) -> int:
    if failures:
        print(f"FAIL {step}: " + "; ".join(failures), flush=True)
        return 1
    print(f"PASS {step}: {summary}", flush=True)
    return 0


def repeats_in(results: Path) -> list[tuple[str, dict[str, Any]]]:
    """(file name, repeat dict) of every result file in ``results``."""
    found = []
    for path in sorted(results.glob("*.json")) if results.is_dir() else []:
        document = json.loads(path.read_text())
        found += [(path.name, r) for r in document.get("repeats", [])]
    return found


def gpu_notes(repeat: dict[str, Any]) -> str:
    """The telemetry's GPU reading of a repeat, for the log (never a failure by itself)."""
    gpu = (repeat.get("telemetry") or {}).get("gpu") or {}
    reasons = gpu.get("slowdown_reasons")
    return (f"throttled {gpu.get('throttled')}" + (f" ({', '.join(reasons)})" if reasons else "")
            + (f", NVML error {gpu['error']}" if gpu.get("error") else ""))


def residuals(p: dict[str, list[float]]) -> list[float]:
    return [s - sum(p[x][i] for x in PHASES) for i, s in enumerate(p["step"])]


# --- the checks on result files (pure: self-test runs them) ----------------------------------


def check_windows(repeats: list[tuple[str, dict[str, Any]]], windows: int, steps: int) -> list[str]:
    """``--windows N``: no window restarts the loader, every window's steps are there, and the
    device steps fill the windows (Σ device steps / window wall time in :data:`RATIO`)."""
    if not repeats:
        return ["no result file"]
    failures = []
    for name, r in repeats:
        where = f"{name} repeat {r.get('index')}"
        if r.get("windows", 1) != windows:
            failures.append(f"{where}: {r.get('windows', 1)} window(s), not {windows}")
        if len(r["phases_ms"]["step"]) != windows * steps:
            failures.append(f"{where}: {len(r['phases_ms']['step'])} steps, not {windows} x {steps}")
        if r.get("loader_restarts") != 0:
            failures.append(f"{where}: the loader restarted {r.get('loader_restarts')} time(s) inside the windows")
        ratio = ((r.get("torch_settings") or {}).get("cuda_window") or {}).get("device_steps_over_window")
        if ratio is None or not RATIO[0] <= ratio <= RATIO[1]:
            failures.append(f"{where}: device steps over the window {ratio} outside {RATIO[0]}-{RATIO[1]}")
        if r.get("timing") != "cuda_events":
            failures.append(f"{where}: timed by {r.get('timing')}, not CUDA events")
    return failures


def check_stall(repeats: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """A real data stall: the exposed (device) data wait never exceeds the host's wait by more
    than :data:`DATA_WAIT_SLACK_MS`, the residual is never below 0 and its median under
    :data:`RESIDUAL_MEDIAN_MS`, and the host did wait for data."""
    if not repeats:
        return ["no result file"]
    failures = []
    for name, r in repeats:
        where = f"{name} repeat {r.get('index')}"
        p = r["phases_ms"]
        if "host_data_wait" not in p:
            failures.append(f"{where}: no host_data_wait (not a CUDA-event timed repeat)")
            continue
        over = [i for i, (d, h) in enumerate(zip(p["data_wait"], p["host_data_wait"], strict=True)) if d > h + DATA_WAIT_SLACK_MS]
        if over:
            i = over[0]
            failures.append(f"{where}: data_wait above host_data_wait + {DATA_WAIT_SLACK_MS} ms in {len(over)} step(s), "
                            f"first step {i}: {p['data_wait'][i]:.3f} > {p['host_data_wait'][i]:.3f}")
        res = residuals(p)
        if min(res) < -1e-6:
            failures.append(f"{where}: residual below 0 ({min(res):.6f} ms)")
        if median(res) >= RESIDUAL_MEDIAN_MS:
            failures.append(f"{where}: residual median {median(res):.3f} ms, not under {RESIDUAL_MEDIAN_MS} ms")
        if median(p["host_data_wait"]) < STALL_MIN_HOST_WAIT_MS:
            failures.append(f"{where}: host data wait median {median(p['host_data_wait']):.3f} ms: no stall to book")
    return failures


def check_script(repeats: list[tuple[str, dict[str, Any]]], report: Path, persistent: bool) -> list[str]:
    """Script mode with DataLoader workers and a Normalize transform: CUDA untouched before
    the script's first line, no worker saw the hooks, the steps timed by CUDA events, and
    (non-persistent) workers forked inside the window, the case the check is about."""
    failures = []
    first = report / "first-line.json"
    if not first.exists():
        failures.append("the script did not report its first line")
    elif json.loads(first.read_text()).get("cuda_initialised") is not False:
        failures.append("CUDA was initialised before the script's first line")
    hooked = sorted(p.name for p in report.glob("hooked-*"))
    if hooked:
        failures.append(f"{len(hooked)} DataLoader worker(s) ran under the hooks: {', '.join(hooked[:4])}")
    pids = set(report.joinpath("workers.txt").read_text().split()) if report.joinpath("workers.txt").exists() else set()
    if not repeats:
        return [*failures, "no result file"]
    for name, r in repeats:
        where = f"{name} repeat {r.get('index')}"
        if r.get("timing") != "cuda_events":
            failures.append(f"{where}: timed by {r.get('timing')}, not CUDA events")
        restarts = r.get("loader_restarts") or 0
        if restarts < 1:
            failures.append(f"{where}: no epoch began inside the window (the case is not exercised)")
        res = residuals(r["phases_ms"])
        if min(res) < -1e-6 or any(v < 0 for x in PHASES for v in r["phases_ms"][x]):
            failures.append(f"{where}: a negative phase or residual")
        if not persistent and len(pids) < 2 * (1 + restarts):
            failures.append(f"{where}: {len(pids)} worker process(es) for {1 + restarts} epochs of 2 workers")
        if persistent and len(pids) != 2:
            failures.append(f"{where}: {len(pids)} worker process(es); persistent workers are 2")
    return failures


# --- the steps ------------------------------------------------------------------------------


def _fork_and_use_cuda() -> tuple[int, str]:
    """Fork a child that runs one CUDA op; its exit status and what it said."""
    import torch

    read, write = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        code, said = 1, ""
        try:
            torch.ones(1, device="cuda").sum().item()
            code, said = 0, "ok"
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            said = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}"
        finally:
            os.write(write, said.encode())
            os._exit(code)
    os.close(write)
    said = b""
    while chunk := os.read(read, 4096):
        said += chunk
    os.close(read)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), said.decode(errors="replace")


def step_fork_probe() -> int:
    """The template's view of the fork against what a forked child finds: with what the
    template imports, a child can use CUDA and the template sees no hazard; after
    ``torch.cuda.is_available()`` (cuInit: torch's fork handler) the template's check and
    the child agree again (a hazard seen exactly when the child's CUDA call fails)."""
    import importlib

    import torch

    import perfgate.measure.template as t

    for module in (*t._PRELOAD, *t._OPTIONAL):
        try:
            importlib.import_module(module)
        except Exception as exc:  # noqa: BLE001 - an optional module missing is the template's business
            print(f"import {module}: {type(exc).__name__}: {exc}")
    failures = []
    hazard = t._fork_hazard() or t._fork_poisoned()
    rc, said = _fork_and_use_cuda()
    print(f"with the template's imports: hazard {hazard}; a forked child's CUDA op: exit {rc} ({said})")
    if hazard is not None:
        failures.append(f"the template's imports spoil the fork ({hazard}): every paired gate starts fresh")
    if (hazard is None) != (rc == 0):
        failures.append("the template's check and the forked child disagree before is_available()")
    available = torch.cuda.is_available()
    hazard_after = t._fork_hazard() or t._fork_poisoned()
    rc_after, said_after = _fork_and_use_cuda()
    print(f"after torch.cuda.is_available() = {available}: initialised {torch.cuda.is_initialized()}, "
          f"hazard {hazard_after}; a forked child's CUDA op: exit {rc_after} ({said_after})")
    if (hazard_after is None) != (rc_after == 0):
        failures.append(f"after is_available() the template's check says {hazard_after!r} but a forked child's "
                        f"CUDA op exits {rc_after} ({said_after})")
    return finish("fork-probe", failures, "a clean template forks children that use CUDA; a poisoned one is seen")


def step_gate(argv: Sequence[str]) -> int:
    """``perfgate selftest resnet18-cifar10`` on CUDA, forked: one A/A gate (must PASS) and one
    with 10% of the step injected into forward on the device (must be a REGRESSION with forward
    flagged); every repeat forked from a template, unless it fell back to fresh with a warning."""
    import argparse

    options = argparse.ArgumentParser(prog="gpu_check.py gate")
    options.add_argument("--warmup", default="5")
    options.add_argument("--steps", default="30")
    options.add_argument("--max-blocks", default="6")
    limit = os.environ.get("GPU_CHECK_LIMIT")  # the step's own time limit, set by gpu-check.sh
    options.add_argument("--budget-s", type=float, default=max(10.0, float(limit) - 30) if limit else None,
                         help="start no gate that would likely end after this (default: the step's limit - 30 s)")
    ns = options.parse_args(list(argv))
    from perfgate.adapters import options as cli_options
    from perfgate.adapters.selection import jobs_of
    from perfgate.adapters.cli import build_parser
    from perfgate.gate.selftest import run_selftest
    from perfgate.measure import template

    args = build_parser().parse_args(gate_command(ns.warmup, ns.steps, ns.max_blocks))
    settings = cli_options.settings_of(args)
    device, (job,) = jobs_of(args, settings)
    request = cli_options.request_of(args, settings, device, [job])
    messages: list[str] = []
    starts: dict[str, int] = {}
    original = template.Starter.call

    def counted(self: Any, module: str, req: dict[str, Any], timeout_s: float, **kw: Any) -> Any:
        run = original(self, module, req, timeout_s, **kw)
        start = str((((run.response or {}).get("repeat") or {}).get("torch_settings") or {}).get("process_start"))
        starts[start] = starts.get(start, 0) + 1
        return run

    template.Starter.call = counted  # type: ignore[method-assign]

    def announce(message: str) -> None:
        messages.append(message)
        print(f"perfgate: {message}", flush=True)

    result = run_selftest(job, settings=settings, gates=1, sizes=(GATE_SIZE,), phases=("forward",), blocks=2,
                          budget_s=ns.budget_s, measuring=request.measuring, announce=announce)
    print(result.card(), end="")
    fallback = [m for m in messages if "repeats start as fresh processes" in m]
    print(f"process starts: {starts}; fallback: {fallback[0] if fallback else 'none'}")
    return finish("gate", gate_failures(result, starts, fallback),
                  f"A/A {verdicts(result.aa)}, +{GATE_SIZE:.0%} forward {verdicts(result.injected(GATE_SIZE))}, "
                  f"starts {starts}")


def gate_command(warmup: str, steps: str, max_blocks: str) -> list[str]:
    return ["selftest", "resnet18-cifar10", "--device", "cuda", "--start", "fork", "--warmup", warmup,
            "--steps", steps, "--max-blocks", max_blocks, "--gates", "1", "--sizes", str(GATE_SIZE),
            "--phases", "forward", "--blocks", "2"]


def verdicts(records: Sequence[Any]) -> str:
    return ", ".join(f"{r.verdict.value} in {r.blocks_used} blocks (x{r.step_change or float('nan'):.3f})"
                     for r in records) or "not run"


def gate_failures(result: Any, starts: dict[str, int], fallback: list[str]) -> list[str]:
    failures = []
    aa, injected = result.aa, result.injected(GATE_SIZE)
    if result.stopped:
        failures.append(result.stopped)
    if [r.verdict.value for r in aa] != ["PASS"]:
        failures.append(f"A/A: {verdicts(aa)}, not PASS")
    if [r.verdict.value for r in injected] != ["REGRESSION"]:
        failures.append(f"+{GATE_SIZE:.0%} in forward: {verdicts(injected)}, not REGRESSION")
    elif not injected[0].right_phase:
        failures.append(f"+{GATE_SIZE:.0%} in forward: forward not flagged (flagged: {injected[0].flagged_slower})")
    if not starts.get("fork") and not fallback:
        failures.append(f"no repeat was forked and no fallback was announced (starts {starts})")
    if fallback and starts.get("fork"):
        print(f"note: forked until: {fallback[0]}")
    return failures


def step_windows(results: Path, windows: int, steps: int) -> int:
    repeats = repeats_in(results)
    for name, r in repeats:
        ratio = ((r.get("torch_settings") or {}).get("cuda_window") or {}).get("device_steps_over_window")
        print(f"{name} repeat {r.get('index')}: {r.get('windows', 1)} windows, {len(r['phases_ms']['step'])} steps, "
              f"restarts {r.get('loader_restarts')}, device steps / window {ratio}, {gpu_notes(r)}")
    return finish("windows", check_windows(repeats, windows, steps), f"{windows} windows, no restart, ratio in range")


def step_stall(results: Path) -> int:
    repeats = repeats_in(results)
    for name, r in repeats:
        p = r["phases_ms"]
        res = residuals(p)
        print(f"{name} repeat {r.get('index')}: median step {median(p['step']):.2f} ms (device), data_wait "
              f"{median(p['data_wait']):.2f} ms, host_data_wait {median(p.get('host_data_wait') or [0]):.2f} ms, "
              f"residual min/median {min(res):.4f}/{median(res):.4f} ms, {gpu_notes(r)}")
    return finish("stall", check_stall(repeats), "the stall is booked on the device within the host's wait")


SCRIPT = '''"""gpu-check's training script: a Normalize transform in 2 DataLoader workers, on CUDA."""
import json
import os
import sys

import torch

REPORT = os.environ["GPU_CHECK_REPORT"]
with open(os.path.join(REPORT, "first-line.json"), "w") as f:
    json.dump({"cuda_initialised": torch.cuda.is_initialized()}, f)

import torchvision.transforms as T  # noqa: E402
from torch.utils.data import DataLoader, Dataset  # noqa: E402

# The script runs under the hooks: torch's own functions, to compare a worker's torch with.
UNHOOKED = torch.nn.Module._wrapped_call_impl
TENSOR_TO = torch._C.TensorBase.to


class Images(Dataset):
    t = T.Normalize([0.5] * 3, [0.25] * 3)

    def __len__(self):
        return 48

    def __getitem__(self, i):
        if torch.nn.Module.__call__ is not UNHOOKED or torch.Tensor.to is not TENSOR_TO:
            open(os.path.join(REPORT, f"hooked-{os.getpid()}"), "w").close()
        return self.t(torch.rand(3, 32, 32)), i % 10


def note_worker(worker_id):
    with open(os.path.join(REPORT, "workers.txt"), "a") as f:
        f.write(f"{os.getpid()}\\n")


if __name__ == "__main__":
    persistent = "--persistent" in sys.argv
    device = os.environ.get("GPU_CHECK_DEVICE", "cuda")  # cpu: the dry run's test of this script
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3072, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(Images(), batch_size=8, num_workers=2, pin_memory=device == "cuda",
                        persistent_workers=persistent, worker_init_fn=note_worker, multiprocessing_context="fork")
    for epoch in range(100):
        for x, y in loader:
            loss = torch.nn.functional.cross_entropy(model(x.to(device, non_blocking=True)),
                                                     y.to(device, non_blocking=True))
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
'''


def step_script(results: Path, report: Path, persistent: bool) -> int:
    repeats = repeats_in(results)
    for name, r in repeats:
        ratio = ((r.get("torch_settings") or {}).get("cuda_window") or {}).get("device_steps_over_window")
        print(f"{name}: {r.get('timing')}, {len(r['phases_ms']['step'])} steps, epochs begun in the window "
              f"{r.get('loader_restarts')}, median step {median(r['phases_ms']['step']):.3f} ms (device), "
              f"device steps / window {ratio}, {gpu_notes(r)}")
    what = "persistent" if persistent else "non-persistent"
    return finish(f"script-{what}", check_script(repeats, report, persistent),
                  f"{what} workers never hooked, CUDA left to the script")


def step_commands(listing: Path) -> int:
    """Dry run: every perfgate command line the check would run parses with this perfgate's CLI."""
    from perfgate.adapters.cli import build_parser

    failures = []
    # One command a line, its arguments each followed by a tab (gpu-check.sh --dry-run).
    lines = [line.split("\t")[:-1] for line in listing.read_text().splitlines() if line.strip()]
    for argv in lines:
        if "-m" in argv and argv[argv.index("-m") + 1] == "perfgate":
            rest = argv[argv.index("-m") + 2:]
            try:
                build_parser().parse_args(rest)
            except SystemExit:
                failures.append(f"does not parse: perfgate {' '.join(rest)}")
        elif len(argv) > 2 and argv[1].endswith("gpu_check.py") and argv[2] not in STEPS:
            failures.append(f"no such step: gpu_check.py {argv[2]}")
    try:
        build_parser().parse_args(gate_command("5", "30", "6"))
    except SystemExit:
        failures.append("the gate step's selftest command does not parse")
    return finish("commands", failures, f"{len(lines)} command lines")


# --- the dry run: every check against readings that must pass and readings that must fail ----


def _repeat(n: int = 6, *, windows: int = 1, restarts: int = 0, ratio: float = 1.0, stall: float = 5.0,
            data_over: float = 0.0, residual: float = 0.2, timing: str = "cuda_events") -> dict[str, Any]:
    steps = n * windows
    p = {"data_wait": [stall - 0.3 + data_over] * steps, "host_data_wait": [stall] * steps, "h2d": [0.1] * steps,
         "forward": [1.0] * steps, "backward": [2.0] * steps, "optimizer": [0.5] * steps}
    p["step"] = [sum(p[x][i] for x in PHASES) + residual for i in range(steps)]
    r: dict[str, Any] = {"index": 0, "timing": timing, "phases_ms": p, "loader_restarts": restarts,
                         "torch_settings": {"cuda_window": {"device_steps_over_window": ratio}},
                         "telemetry": {"gpu": {"throttled": False, "slowdown_reasons": []}}}
    if windows > 1:
        r["windows"] = windows
    return r


def self_test(tmp: Path) -> int:
    failures = []

    def expect(name: str, found: list[str], ok: bool) -> None:
        if bool(found) == ok:
            failures.append(f"{name}: {'failed' if ok else 'passed'} ({found})")

    one = [("r.json", _repeat(30, windows=3))]
    expect("windows good", check_windows(one, 3, 30), True)
    expect("windows restarted", check_windows([("r.json", _repeat(30, windows=3, restarts=2))], 3, 30), False)
    expect("windows ratio low", check_windows([("r.json", _repeat(30, windows=3, ratio=0.9))], 3, 30), False)
    expect("windows ratio high", check_windows([("r.json", _repeat(30, windows=3, ratio=1.03))], 3, 30), False)
    expect("windows missing", check_windows([], 3, 30), False)
    expect("stall good", check_stall([("r.json", _repeat())]), True)
    expect("stall data over host", check_stall([("r.json", _repeat(data_over=0.9))]), False)
    expect("stall residual", check_stall([("r.json", _repeat(residual=1.5))]), False)
    expect("stall negative", check_stall([("r.json", _repeat(residual=-0.01))]), False)
    expect("stall none", check_stall([("r.json", _repeat(stall=0.5))]), False)
    expect("stall cpu", check_stall([("r.json", {**_repeat(), "phases_ms": {
        k: v for k, v in _repeat()["phases_ms"].items() if k != "host_data_wait"}})]), False)
    for persistent, pids in ((False, 6), (True, 2)):
        report = tmp / f"report-{persistent}"
        report.mkdir()
        (report / "first-line.json").write_text('{"cuda_initialised": false}')
        (report / "workers.txt").write_text("".join(f"{100 + i}\n" for i in range(pids)))
        good = [("s.json", _repeat(restarts=2))]
        expect(f"script {persistent} good", check_script(good, report, persistent), True)
        expect(f"script {persistent} no epoch in window", check_script([("s.json", _repeat(restarts=0))], report,
                                                                        persistent), False)
        (report / "hooked-123").write_text("")
        expect(f"script {persistent} hooked worker", check_script(good, report, persistent), False)
        (report / "hooked-123").unlink()
        (report / "first-line.json").write_text('{"cuda_initialised": true}')
        expect(f"script {persistent} cuda before", check_script(good, report, persistent), False)
    fake = type("R", (), {})

    def record(verdict: str, right: bool = True) -> Any:
        r = fake()
        r.verdict, r.blocks_used, r.step_change, r.right_phase = type("V", (), {"value": verdict})(), 3, 1.0, right
        r.flagged_slower = ("forward",) if right else ()
        return r

    def selftest(aa: str, injected: str, right: bool = True, stopped: str | None = None) -> Any:
        s = fake()
        s.aa, s.stopped = [record(aa)], stopped
        s.injected = lambda size: [record(injected, right)]
        return s

    expect("gate good", gate_failures(selftest("PASS", "REGRESSION"), {"fork": 16}, []), True)
    expect("gate fell back", gate_failures(selftest("PASS", "REGRESSION"), {"fresh": 16}, ["warning: ..."]), True)
    expect("gate false alarm", gate_failures(selftest("REGRESSION", "REGRESSION"), {"fork": 16}, []), False)
    expect("gate undecided", gate_failures(selftest("INCONCLUSIVE", "REGRESSION"), {"fork": 16}, []), False)
    expect("gate missed", gate_failures(selftest("PASS", "PASS"), {"fork": 16}, []), False)
    expect("gate wrong phase", gate_failures(selftest("PASS", "REGRESSION", right=False), {"fork": 16}, []), False)
    expect("gate never forked", gate_failures(selftest("PASS", "REGRESSION"), {"fresh": 16}, []), False)
    expect("gate budget", gate_failures(selftest("PASS", "REGRESSION", stopped="stopped by"), {"fork": 9}, []), False)
    compile(SCRIPT, "gpu-check-train.py", "exec")
    return finish("self-test", failures, "every check passes good readings and fails bad ones")


STEPS = ("fork-probe", "gate", "windows", "stall", "write-script", "script", "commands", "self-test")


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    what, rest = argv[0], argv[1:]
    steps: dict[str, Callable[[], int]] = {
        "fork-probe": step_fork_probe,
        "gate": lambda: step_gate(rest),
        "windows": lambda: step_windows(Path(rest[0]), int(rest[1]), int(rest[2])),
        "stall": lambda: step_stall(Path(rest[0])),
        "write-script": lambda: (Path(rest[0]).write_text(SCRIPT), 0)[1],
        "script": lambda: step_script(Path(rest[0]), Path(rest[1]), rest[2] == "persistent"),
        "commands": lambda: step_commands(Path(rest[0])),
    }
    if what == "self-test":
        import tempfile

        with tempfile.TemporaryDirectory(prefix="gpu-check-self-test-") as tmp:
            return self_test(Path(tmp))
    if what not in steps:
        print(f"gpu_check.py: unknown step {what!r}; steps: {', '.join([*steps, 'self-test'])}", file=sys.stderr)
        return 2
    return steps[what]()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
