#!/usr/bin/env bash
# One command for a machine with an NVIDIA GPU: is perfgate measuring right on it?
#
#   bash scripts/gpu-check.sh [OUT_DIR]      (default: gpu-check-<date>)
#
# Runs `perfgate doctor` (with its CUDA micro-run), two repeats of each reference workload
# on cuda, a profiler trace of resnet18-cifar10, and the tests marked `gpu`, each under a
# timeout (all of them within 10 minutes), and writes everything into OUT_DIR:
#   summary.txt      the key figures: device time against wall time, busy fraction, step
#                    medians per workload, the doctor's verdicts, each step's exit status
#   doctor.json/.txt the card; nvidia-smi.txt the driver's view; results/ traces/ the runs;
#   *.log            each step's output; pytest-gpu.xml the tests
# Exit status: 0 when every step passed, 1 when one failed (named in summary.txt), 2 when
# it cannot run here (no nvidia-smi). It creates .venv (scripts/setup.sh) when missing.

# First, before anything else runs: a machine without the NVIDIA driver gets one clear line.
if ! command -v nvidia-smi >/dev/null 2>&1; then
    echo "gpu-check: nvidia-smi is not on PATH: this check needs a machine with an NVIDIA GPU and its driver" >&2
    echo "gpu-check: (on a CPU machine, run: perfgate doctor)" >&2
    exit 2
fi
set -uo pipefail

case "${1:-}" in
    -h | --help)
        sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
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

# Timeouts, seconds (their sum stays under 10 minutes, set-up excluded).
T_SMI=30
T_DOCTOR=120
T_RUN=280
T_REPEAT=240
T_TRACE=90
T_TESTS=50

if [ ! -x .venv/bin/perfgate ]; then
    echo "gpu-check: no .venv here: bash scripts/setup.sh" >&2
    bash scripts/setup.sh || { echo "gpu-check: scripts/setup.sh failed" >&2; exit 2; }
fi
py="$root/.venv/bin/python"
perfgate="$root/.venv/bin/perfgate"

steps="$out/steps.tsv"
printf 'step\texit\tseconds\n' >"$steps"
started=$SECONDS

# step NAME LIMIT_S COMMAND...: run it under a timeout, output to NAME.log, status to steps.tsv.
step() {
    local name=$1 limit=$2 rc t0=$SECONDS
    shift 2
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

# The doctor's JSON goes to doctor.json; its stderr (an error line) to doctor.log.
t0=$SECONDS
echo "gpu-check: doctor (at most ${T_DOCTOR} s) ..." >&2
timeout --kill-after=10 "$T_DOCTOR" "$perfgate" doctor --device cuda --json >"$out/doctor.json" 2>"$out/doctor.log"
rc=$?
printf '%s\t%s\t%s\n' doctor "$rc" "$((SECONDS - t0))" >>"$steps"
echo "gpu-check: doctor: exit $rc in $((SECONDS - t0)) s" >&2

step run "$T_RUN" "$perfgate" run resnet18-cifar10 resnet18-imagenette --device cuda --repeats 2 \
    --timeout "$T_REPEAT" --out "$out/results"
step trace "$T_TRACE" "$perfgate" trace resnet18-cifar10 --device cuda --timeout "$((T_TRACE - 10))" \
    --trace-dir "$out/traces" --out "$out/trace-results"
step tests "$T_TESTS" "$py" -m pytest -q -m gpu -p no:cacheprovider --junitxml "$out/pytest-gpu.xml"

"$py" - "$out" "$((SECONDS - started))" <<'PY' >"$out/summary.txt" 2>&1
import json
import sys
from pathlib import Path
from statistics import median

from perfgate.doctor import Card, render
from perfgate.result import load_result
from perfgate.summary import summarise

out, elapsed = Path(sys.argv[1]), int(sys.argv[2])
print(f"gpu-check in {out} ({elapsed} s)")
rows = [line.split("\t") for line in (out / "steps.tsv").read_text().splitlines()[1:]]
failed = [name for name, rc, _ in rows if rc != "0"]
for name, rc, seconds in rows:
    print(f"  {name:<11} exit {rc:>3}  {seconds:>4} s")

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
    print("  no result files; see run.log")
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
