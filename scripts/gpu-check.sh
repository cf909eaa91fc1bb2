#!/usr/bin/env bash
# One command for a machine with an NVIDIA GPU: does perfgate measure right on it? Every
# step asserts (scripts/gpu_check.py holds the assertions); nothing is left to be read.
#
#   bash scripts/gpu-check.sh [OUT_DIR]          (default: gpu-check-<date>)
#   bash scripts/gpu-check.sh --dry-run [OUT_DIR] (any machine: the plan, every perfgate
#                                                  command line parsed, every check run
#                                                  against good and bad readings)
#
# The steps, most valuable first, each under its own limit and all within one budget
# (GPU_CHECK_BUDGET seconds, default 540: about 7 minutes on a T4, 4 on an H200; a step the
# budget cannot hold any more is SKIPPED, and the check fails):
#   fork-probe   with the template's imports a forked child uses CUDA and the template sees
#                no hazard; after torch.cuda.is_available() the template's check and a forked
#                child agree (the hazard seen exactly when the child's CUDA call fails)
#   gate         perfgate selftest resnet18-cifar10, forked: an A/A paired gate must PASS and
#                one with 10% of the step injected into forward on the device must be a
#                REGRESSION with forward flagged; the repeats forked, or fallen back to fresh
#                processes with the warning
#   windows      --windows 3: no loader restart, 3 x 30 steps, Σ device steps / window wall
#                time in 0.95-1.02 (the CLOCK-MISMATCH bounds)
#   stall        sample_delay_ms=3: every step's data_wait <= host_data_wait + 0.5 ms, the
#                residual never below 0 and its median under 1 ms, the host did wait
#   script-np    perfgate run --script: 2 non-persistent DataLoader workers with a Normalize
#                transform, epochs starting inside the window: CUDA not initialised before
#                the script's first line, no worker runs under the hooks, CUDA-event timing
#   script-p     the same with persistent workers
#   gpu-tests    pytest -m gpu
# OUT_DIR gets each step's log (<step>.log), steps.tsv, the results and pytest-gpu.xml.
# Exit status: 0 every step passed, 1 one failed, timed out or was skipped, 2 it cannot run
# here (no nvidia-smi, no CUDA device, or no Python with torch and perfgate). It needs no
# network: the Python is PERFGATE_PYTHON, else .venv/bin/python, else python3, with torch
# installed; perfgate is installed into it (pip --no-deps --no-build-isolation, offline)
# when it cannot import it.

set -uo pipefail

dry=0
out=""
for arg in "$@"; do
    case "$arg" in
        -h | --help) sed -n '2,34p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        --dry-run) dry=1 ;;
        -*) echo "gpu-check: unknown option $arg; usage: bash scripts/gpu-check.sh [--dry-run] [OUT_DIR]" >&2; exit 2 ;;
        *)
            if [ -n "$out" ]; then
                echo "gpu-check: usage: bash scripts/gpu-check.sh [--dry-run] [OUT_DIR]" >&2
                exit 2
            fi
            out=$arg
            ;;
    esac
done

# Before anything else is made: a machine without the NVIDIA driver gets one clear line.
if [ "$dry" -eq 0 ] && ! command -v nvidia-smi >/dev/null 2>&1; then
    echo "gpu-check: nvidia-smi is not on PATH: this check needs a machine with an NVIDIA GPU and its driver" >&2
    echo "gpu-check: (on a CPU machine: bash scripts/gpu-check.sh --dry-run, and perfgate doctor)" >&2
    exit 2
fi

root="$(cd "$(dirname "$0")/.." && pwd)"
out="${out:-gpu-check-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$out" || { echo "gpu-check: cannot create $out" >&2; exit 2; }
out="$(cd "$out" && pwd)"
cd "$root" || exit 2

budget="${GPU_CHECK_BUDGET:-540}"
case "$budget" in
    '' | *[!0-9]*) echo "gpu-check: GPU_CHECK_BUDGET must be a whole number of seconds, got '$budget'" >&2; exit 2 ;;
esac

if [ -n "${PERFGATE_PYTHON:-}" ]; then
    py="$PERFGATE_PYTHON"
elif [ -x "$root/.venv/bin/python" ]; then
    py="$root/.venv/bin/python"
else
    py="$(command -v python3 || true)"
fi
if [ -z "$py" ] || ! "$py" -c "import torch" >/dev/null 2>&1; then
    echo "gpu-check: no Python with torch here (set PERFGATE_PYTHON)" >&2
    exit 2
fi
if ! "$py" -c "import perfgate, perfgate_workloads" >/dev/null 2>&1; then
    echo "gpu-check: installing this perfgate into $py (no dependencies, no network)" >&2
    "$py" -m pip install -q --no-deps --no-build-isolation -e "$root" >"$out/install.log" 2>&1
    if ! "$py" -c "import perfgate, perfgate_workloads" >/dev/null 2>&1; then
        echo "gpu-check: $py cannot import perfgate and perfgate_workloads (see $out/install.log)" >&2
        exit 2
    fi
fi
if [ "$dry" -eq 0 ]; then
    # In a process of its own: torch.cuda.is_available() spoils every later fork of the process that calls it.
    if ! "$py" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 3)" >/dev/null 2>&1; then
        echo "gpu-check: torch sees no CUDA device here; on a CPU machine: bash scripts/gpu-check.sh --dry-run" >&2
        exit 2
    fi
    nvidia-smi -q -d CLOCK,PERFORMANCE >"$out/nvidia-smi.txt" 2>&1
fi

export PERFGATE_CACHE_DIR="$out/cache"  # the synthetic data, made here once, never downloaded
check=("$py" "$root/scripts/gpu_check.py")
perfgate=("$py" -m perfgate)
status="$out/steps.tsv"
printf 'step\tstatus\tseconds\n' >"$status"
commands="$out/commands.tsv"
: >"$commands"
started=$SECONDS

# run NAME LIMIT COMMAND...: the command under its limit (or what is left of the budget, when
# that is less), its output to NAME.log; rc holds its exit status (124: timed out; 200: skipped,
# under 20 s of the budget left). A dry run only writes the command line to commands.tsv.
rc=0
run() {
    local name=$1 limit=$2 left
    shift 2
    left=$((budget - (SECONDS - started)))
    [ "$left" -lt "$limit" ] && limit=$left
    if [ "$dry" -eq 1 ]; then
        printf '%s\t' "$@" >>"$commands"
        printf '\n' >>"$commands"
        echo "gpu-check: $name (at most ${limit} s): $*" >&2
        rc=0
        return
    fi
    if [ "$limit" -lt 20 ]; then
        echo "gpu-check: $name skipped: ${left} s of the ${budget} s budget left" | tee -a "$out/$name.log" >&2
        rc=200
        return
    fi
    echo "gpu-check: $name (at most ${limit} s) ..." >&2
    GPU_CHECK_LIMIT=$limit timeout --kill-after=10 "$limit" "$@" >>"$out/$name.log" 2>&1
    rc=$?
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        echo "gpu-check: $name timed out after ${limit} s" | tee -a "$out/$name.log" >&2
        rc=124
    fi
}

# verdict NAME T0 [CHECK...]: the step's status from rc and, when it ran, the check on what it
# wrote (its PASS/FAIL line goes to the log and the terminal).
verdict() {
    local name=$1 t0=$2 state
    shift 2
    if [ "$dry" -eq 1 ]; then
        return
    fi
    case "$rc" in
        200) state=SKIPPED ;;
        124) state=TIMEOUT ;;
        *)
            if [ "$#" -gt 0 ]; then
                if [ "$rc" -ne 0 ]; then
                    echo "FAIL $name: the command exited $rc (see $name.log)" >>"$out/$name.log"
                elif "$@" >>"$out/$name.log" 2>&1; then
                    rc=0
                else
                    rc=1
                fi
            fi
            if [ "$rc" -eq 0 ]; then state=PASS; else state=FAIL; fi
            ;;
    esac
    printf '%s\t%s\t%s\n' "$name" "$state" "$((SECONDS - t0))" >>"$status"
    echo "gpu-check: $name: $state in $((SECONDS - t0)) s; $(grep -E '^(PASS|FAIL) ' "$out/$name.log" | tail -n 1)" >&2
}

t0=$SECONDS
run fork-probe 60 "${check[@]}" fork-probe
verdict fork-probe "$t0"

t0=$SECONDS
run gate 300 "${check[@]}" gate --warmup 5 --steps 30 --max-blocks 6
verdict gate "$t0"

t0=$SECONDS
run windows 90 "${perfgate[@]}" run resnet18-cifar10 --device cuda --start fresh --repeats 1 --windows 3 \
    --warmup 5 --steps 30 --out "$out/windows"
verdict windows "$t0" "${check[@]}" windows "$out/windows" 3 30

t0=$SECONDS
run stall 90 "${perfgate[@]}" run resnet18-cifar10 --device cuda --start fresh --repeats 1 \
    --warmup 5 --steps 30 --set sample_delay_ms=3 --out "$out/stall"
verdict stall "$t0" "${check[@]}" stall "$out/stall"

"${check[@]}" write-script "$out/gpu_check_train.py"
for kind in non-persistent persistent; do
    name="script-np"
    extra=()
    if [ "$kind" = persistent ]; then name="script-p"; extra=(-- --persistent); fi
    report="$out/$name-report"
    rm -rf "$report"
    mkdir -p "$report"
    export GPU_CHECK_REPORT="$report"  # where the script writes what it saw (gpu_check.py script reads it)
    t0=$SECONDS
    run "$name" 75 "${perfgate[@]}" run --script "$out/gpu_check_train.py" \
        --name gpu-check-train --device cuda --repeats 1 --warmup 3 --steps 12 -v --out "$out/$name" "${extra[@]}"
    verdict "$name" "$t0" "${check[@]}" script "$out/$name" "$report" "$kind"
done

t0=$SECONDS
run gpu-tests 180 "$py" -m pytest -q -m gpu -p no:cacheprovider --junitxml "$out/pytest-gpu.xml"
verdict gpu-tests "$t0"

if [ "$dry" -eq 1 ]; then
    echo "gpu-check: dry run: the commands above were not run; checking what can be checked here" >&2
    "${check[@]}" commands "$commands" && "${check[@]}" self-test
    exit $?
fi

echo
echo "gpu-check in $out ($((SECONDS - started)) s of the ${budget} s budget)"
column -t -s $'\t' "$status" 2>/dev/null || cat "$status"
if awk -F'\t' 'NR > 1 && $2 != "PASS" { bad = 1 } END { exit bad }' "$status"; then
    echo "all steps passed"
    exit 0
fi
echo "failed: $(awk -F'\t' 'NR > 1 && $2 != "PASS" { printf "%s%s (%s)", sep, $1, $2; sep = ", " }' "$status")"
exit 1
