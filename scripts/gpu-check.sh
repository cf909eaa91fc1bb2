#!/usr/bin/env bash
# One command for a machine with an NVIDIA GPU: is perfgate measuring right on it?
#
#   bash scripts/gpu-check.sh [OUT_DIR]      (default: gpu-check-<date>)
#
# Runs, in this order, each under its own timeout and all of them within one budget
# (GPU_CHECK_BUDGET seconds, default 590; a step the budget cannot hold is skipped and
# named): `perfgate doctor` (with its CUDA micro-run), two repeats of resnet18-cifar10 on
# cuda, its counted run, the tests marked `gpu`, the counted run of
# resnet18-cifar10-compiled (compile time, graph breaks, recompiles), the instrumentation
# overhead benchmark, a profiler trace, and two repeats of resnet18-imagenette. It writes
# everything into OUT_DIR:
#   summary.txt      the key figures: device time against wall time, busy fraction, step
#                    medians, counters, overhead, the doctor's verdicts, each step's status
#   doctor.json/.txt the card; nvidia-smi.txt the driver's view; results/ counters/
#                    traces/ the runs; *.log each step's output; pytest-gpu.xml the tests
# Exit status: 0 when every step passed, 1 when one failed or was skipped (named in
# summary.txt), 2 when it cannot run here (no nvidia-smi). It creates .venv
# (scripts/setup.sh) when missing, unless PERFGATE_PYTHON names an interpreter that has
# perfgate installed already.

# First, before anything else runs: a machine without the NVIDIA driver gets one clear line.
if ! command -v nvidia-smi >/dev/null 2>&1; then
    echo "gpu-check: nvidia-smi is not on PATH: this check needs a machine with an NVIDIA GPU and its driver" >&2
    echo "gpu-check: (on a CPU machine, run: perfgate doctor)" >&2
    exit 2
fi
set -uo pipefail

case "${1:-}" in
    -h | --help)
        sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'
        exit 0
        ;;
esac
if [ "$#" -gt 1 ]; then
    echo "gpu-check: usage: bash scripts/gpu-check.sh [OUT_DIR]" >&2
    exit 2
fi

out="${1:-gpu-check-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$out" || { echo "gpu-check: cannot create $out" >&2; exit 2; }
out="$(cd "$out" && pwd)"
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root" || exit 2

# Each step's own limit, seconds; all of them share GPU_CHECK_BUDGET (set-up excluded).
T_SMI=30
T_DOCTOR=120
T_REPEAT=120
T_RUN=240
T_COUNT=120
T_TESTS=120
T_COMPILED=240
T_OVERHEAD=120
T_TRACE=90
budget="${GPU_CHECK_BUDGET:-590}"
case "$budget" in
    '' | *[!0-9]*) echo "gpu-check: GPU_CHECK_BUDGET must be a whole number of seconds, got '$budget'" >&2; exit 2 ;;
esac

if [ -n "${PERFGATE_PYTHON:-}" ]; then
    py="$PERFGATE_PYTHON"
    if ! "$py" -c "import perfgate, perfgate_workloads" >/dev/null 2>&1; then
        echo "gpu-check: PERFGATE_PYTHON=$py cannot import perfgate and perfgate_workloads" >&2
        exit 2
    fi
    perfgate=("$py" -m perfgate)
else
    if [ ! -x .venv/bin/perfgate ]; then
        echo "gpu-check: no .venv here: bash scripts/setup.sh" >&2
        bash scripts/setup.sh || { echo "gpu-check: scripts/setup.sh failed" >&2; exit 2; }
    fi
    py="$root/.venv/bin/python"
    perfgate=("$root/.venv/bin/perfgate")
fi

steps="$out/steps.tsv"
printf 'step\texit\tseconds\n' >"$steps"
started=$SECONDS

# step NAME LIMIT_S COMMAND...: run it under a timeout (its own limit, or what is left of
# the budget when that is less), output to NAME.log, status to steps.tsv. A step with less
# than 20 s of the budget left is skipped, with exit status "skipped".
step() {
    local name=$1 limit=$2 rc t0=$SECONDS left
    shift 2
    left=$((budget - (SECONDS - started)))
    if [ "$left" -lt 20 ]; then
        echo "gpu-check: $name skipped: ${left} s of the ${budget} s budget left" | tee "$out/$name.log" >&2
        printf '%s\t%s\t%s\n' "$name" skipped 0 >>"$steps"
        return 0
    fi
    [ "$left" -lt "$limit" ] && limit=$left
    echo "gpu-check: $name (at most ${limit} s) ..." >&2
    timeout --kill-after=10 "$limit" "$@" >"$out/$name.log" 2>&1
    rc=$?
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        echo "gpu-check: $name timed out after ${limit} s" | tee -a "$out/$name.log" >&2
    fi
    printf '%s\t%s\t%s\n' "$name" "$rc" "$((SECONDS - t0))" >>"$steps"
    echo "gpu-check: $name: exit $rc in $((SECONDS - t0)) s" >&2
    return 0
}

step nvidia-smi "$T_SMI" nvidia-smi -q -d CLOCK,PERFORMANCE,ECC,PIDS
cp "$out/nvidia-smi.log" "$out/nvidia-smi.txt"
nvidia-smi >>"$out/nvidia-smi.txt" 2>&1

# The doctor's JSON goes to doctor.json, its stderr to doctor.log.
# shellcheck disable=SC2016  # expanded by the inner bash
step doctor "$T_DOCTOR" bash -c '"$@" 2>"$0"' "$out/doctor.log.stderr" "${perfgate[@]}" doctor --device cuda --json
mv "$out/doctor.log" "$out/doctor.json"
mv "$out/doctor.log.stderr" "$out/doctor.log" 2>/dev/null || true

step run-cifar10 "$T_RUN" "${perfgate[@]}" run resnet18-cifar10 --device cuda --repeats 2 \
    --timeout "$T_REPEAT" --out "$out/results"
step counters-cifar10 "$T_COUNT" "${perfgate[@]}" counters resnet18-cifar10 --device cuda --out "$out/counters"
step tests "$T_TESTS" "$py" -m pytest -q -m gpu -p no:cacheprovider --junitxml "$out/pytest-gpu.xml"
step counters-compiled "$T_COMPILED" "${perfgate[@]}" counters resnet18-cifar10-compiled --device cuda \
    --timeout "$((T_COMPILED - 10))" --out "$out/counters"
step overhead "$T_OVERHEAD" "$py" benchmarks/overhead_cuda.py
step trace "$T_TRACE" "${perfgate[@]}" trace resnet18-cifar10 --device cuda --timeout "$((T_TRACE - 10))" \
    --trace-dir "$out/traces" --out "$out/trace-results"
step run-imagenette "$T_RUN" "${perfgate[@]}" run resnet18-imagenette --device cuda --repeats 2 \
    --timeout "$T_REPEAT" --out "$out/results"

"$py" - "$out" "$((SECONDS - started))" <<'PY' >"$out/summary.txt" 2>&1
import json
import sys
from pathlib import Path
from statistics import median

from perfgate.adapters.doctor import Card, render
from perfgate.store.results import load_result
from perfgate.analysis.summary import summarise

out, elapsed = Path(sys.argv[1]), int(sys.argv[2])
print(f"gpu-check in {out} ({elapsed} s)")
rows = [line.split("\t") for line in (out / "steps.tsv").read_text().splitlines()[1:]]
failed = [name for name, rc, _ in rows if rc != "0"]
for name, rc, seconds in rows:
    print(f"  {name:<18} exit {rc:>7}  {seconds:>4} s")

print("\ndoctor")
try:
    card = Card.from_dict(json.loads((out / "doctor.json").read_text()))
except Exception as exc:  # noqa: BLE001 - the doctor failed: its log says why
    print(f"  no card ({type(exc).__name__}: {exc}); see doctor.log")
else:
    (out / "doctor.txt").write_text(render(card) + "\n")
    for check in card.checks:
        print(f"  {check.status:<8} {check.name:<14} {check.detail}")
    run = card.micro_run
    if run:
        wall_ms = run["wall_s"] * 1e3
        print(f"  micro-run: Σ event time {run['busy_ms']:.1f} ms of {wall_ms:.1f} ms wall "
              f"(busy {run['busy_ms'] / wall_ms:.2%}), events first to last {run['span_ms']:.1f} ms, "
              f"{run['steps']} steps of {run['step_median_ms']:.3f} ms")

print("\nworkloads (perfgate run --device cuda --repeats 2)")
results = sorted((out / "results").glob("*.json")) if (out / "results").is_dir() else []
if not results:
    print("  no result files; see run-*.log")
for path in results:
    try:
        result = load_result(path)
        summary = summarise(result)
    except Exception as exc:  # noqa: BLE001
        print(f"  {path.name}: unreadable ({type(exc).__name__}: {exc})")
        continue
    busy = summary.device_busy_fraction
    print(f"  {result.workload}: step median {summary.median_ms['step']:.2f} ms over {len(result.repeats)} "
          f"repeats, spread {summary.spread['step'] or 0:.2%}, device busy "
          + (f"{busy:.1%}" if busy is not None else "n/a (not CUDA-event timed)"))
    for repeat in result.repeats:
        device = repeat.phases_ms.get("device_busy")
        wall = repeat.phases_ms["step"]
        line = (f"    repeat {repeat.index}: {repeat.timing}, {len(wall)} steps, step median {median(wall):.2f} ms "
                f"(wall), window {repeat.window_s:.3f} s")
        if device:
            line += (f"; device median {median(device):.2f} ms/step, Σ device {sum(device) / 1e3:.3f} s "
                     f"of the window ({sum(device) / (repeat.window_s * 1e3):.1%})")
        telemetry = repeat.telemetry or {}
        gpu = telemetry.get("gpu") or {}
        if gpu.get("throttled"):
            line += f"; throttled: {', '.join(gpu.get('throttle_reasons') or [])}"
        print(line)

print("\ncounted runs (perfgate counters --device cuda), totals over the counted steps")
from perfgate.store.counters import load_counters

counted = sorted((out / "counters").glob("*.counters.json")) if (out / "counters").is_dir() else []
if not counted:
    print("  no counter files; see counters-*.log")
for path in counted:
    try:
        cs = load_counters(path)
    except Exception as exc:  # noqa: BLE001
        print(f"  {path.name}: unreadable ({type(exc).__name__}: {exc})")
        continue
    print(f"  {cs.workload} on {cs.device}, {cs.steps} counted steps, torch {cs.torch_version}; "
          + ", ".join(f"{k} {v}" for k, v in cs.timings.items()))
    for phase, pc in cs.phases.items():
        print(f"    {phase:<10} ops {sum(pc.ops.values()):>6}  launches {pc.kernel_launches}  memcpy {pc.memcpy_calls}  "
              f"syncs {sum(s.count for s in pc.syncs)}  FLOPs {pc.flops:.3e}"
              + (f"  allocations {pc.allocator.allocations}" if pc.allocator else ""))
        for site in pc.syncs:
            print(f"      sync: {site.call} at {site.location} x{site.count}")
    if cs.compile is not None:
        c = cs.compile
        print(f"    compile: {c.frames_compiled} frame(s), {c.recompiles} recompile(s), "
              f"{c.graph_break_count} graph break(s), {c.compiles_in_counted_steps} compile(s) while counting")
    for key, why in cs.unavailable.items():
        print(f"    not counted: {key}: {why}")

overhead = (out / "overhead.log").read_text(errors="replace").splitlines() if (out / "overhead.log").exists() else []
print("\noverhead (benchmarks/overhead_cuda.py)")
for line in overhead[-12:]:
    print("  " + line)

folder = out / "traces"
traces = sorted(str(p.relative_to(out)) for p in folder.rglob("trace-*.json")) if folder.is_dir() else []
tables = sorted(str(p.relative_to(out)) for p in folder.rglob("operators.json")) if folder.is_dir() else []
print(f"\ntrace: {len(traces)} Chrome trace(s) {', '.join(traces)}; operator tables: {', '.join(tables) or 'none'}"
      if traces else "\ntrace: none; see trace.log")
tests = (out / "tests.log").read_text(errors="replace").strip().splitlines() if (out / "tests.log").exists() else []
print(f"tests marked gpu: {tests[-1] if tests else 'no output'}")
print("\n" + ("all steps passed" if not failed else f"failed: {', '.join(failed)} (see their .log files)"))
PY
cat "$out/summary.txt"
if grep -q '^all steps passed$' "$out/summary.txt"; then
    exit 0
fi
exit 1
