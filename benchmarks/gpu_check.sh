#!/usr/bin/env bash
# benchmarks/gpu_check.sh: check gnnsys on a CUDA machine in one command, within a time budget.
#
#   bash benchmarks/gpu_check.sh [--out DIR] [--budget SECONDS] [--python PY] [--wheels DIR]
#                                [--skip STEP[,STEP...]] [--dry-run] [-h|--help]
#
# Steps, in order, each bounded by `timeout` (its limit in seconds below; 360 s in all, so they fit a 400 s
# budget with a margin) and all of them by --budget (default 540 s):
#   install (30) pip install --no-deps --no-build-isolation --no-index -e . into PY (default python3),
#                 with those carried wheels (--wheels, default benchmarks/.gpu-wheels, made on a machine
#                 with network by benchmarks/make_gpu_wheels.sh) whose module PY cannot import yet;
#                 PY's torch and every other installed package are left as they are
#   smoke (60)    pytest -m gpu tests/gnnsys/test_gpu_smoke.py: every placement x {cuda, cuda:0} x
#                 {cpu, gpu} sampler against x[ids], and a tiny train() on each
#   cases (90)    benchmarks/gpu_smoke.py, one tiny run per CUDA path, each written to gpu_smoke.jsonl as it
#                 ends: SSD tier + cache + victim buffer + lookahead with the CPU and the GPU sampler,
#                 bf16-mixed, 16-mixed, a CUDA cache's gathers against x[ids], the shared cache on one rank;
#                 with two or more GPUs also data-parallel, the shared cache and GNNPipe with --workers 2
#                 (with one GPU those are "skipped": NCCL multi-rank needs two GPUs)
#   gpu-tests (45) pytest -m gpu on the rest of tests/
#   kernel-tests (45) the Triton kernels' own tests (gather and GPU sampler), compiled and run on the GPU
#   memcheck (30) compute-sanitizer memcheck on the out-of-range and strided-id gather tests (skipped
#                 where compute-sanitizer is not installed)
#   bench-gather (20) benchmarks/bench_gather_gpu.py, short: 2 row sizes, a 256 MiB table
#   bench-epoch (40) benchmarks/bench_epoch_gpu.py, short: products x0.01, 2 epochs, gpu and pinned features
#                 x both samplers; its JSON is rewritten after each case
# Results under --out (default $OUT, else ./gpu-check-out): gpu_check.json (the machine; each step's
# status, exit code, seconds, command and output tail; pytest counts and failures; the smoke cases),
# gpu_check.log (all output), gpu_smoke.jsonl, bench_gather_gpu.json and bench_epoch_gpu.json, each
# written as results arrive. A step the budget leaves no time for, or cut short by the budget rather
# than by its own limit, is "incomplete", not failed. Exit status 0 when every step ran and passed, 1
# when a step failed (or ran past its own limit), 3 when none failed but some were incomplete, 2 for
# bad arguments or (--dry-run) step limits that do not fit the budget.
#
# Assumes PY has a CUDA build of torch (with the triton and the pure-Python packages it depends on),
# numpy, numba and llvmlite, scipy, pandas, and psutil and xxhash (which torch_geometric imports): binary
# packages, never carried. pymetis is optional (GNNPipe partitioning only). Carries only pure-Python
# wheels: torch_geometric, tqdm and requests (with its dependencies), and pytest (with its dependencies)
# and pytest-timeout.
#
# --dry-run works on any machine, with or without CUDA: it checks the arguments, runs the install step
# with pip's --dry-run (pip builds the editable metadata and resolves the wheels; nothing is installed),
# prints the command of every other step and writes gpu_check.json with those steps "planned"; it exits
# with status 2 when the limits of the steps not skipped, plus a 10% margin, exceed --budget.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STEPS=(install smoke cases gpu-tests kernel-tests memcheck bench-gather bench-epoch)
declare -A LIMIT=([install]=30 [smoke]=60 [cases]=90 [gpu-tests]=45 [kernel-tests]=45 [memcheck]=30
                  [bench-gather]=20 [bench-epoch]=40)
MIN_STEP_S=20  # a step gets at least this much of the budget, or is skipped

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'; }
fail_args() { echo "gpu_check: $1 (see --help)" >&2; exit 2; }

OUT_DIR=${OUT:-$PWD/gpu-check-out}
BUDGET=540
PY=python3
WHEELS=$ROOT/benchmarks/.gpu-wheels
SKIP=""
DRY_RUN=0
while (($#)); do
    case $1 in
        --out) (($# >= 2)) || fail_args "--out needs a directory"; OUT_DIR=$2; shift 2 ;;
        --budget) (($# >= 2)) || fail_args "--budget needs seconds"; BUDGET=$2; shift 2 ;;
        --python) (($# >= 2)) || fail_args "--python needs an interpreter"; PY=$2; shift 2 ;;
        --wheels) (($# >= 2)) || fail_args "--wheels needs a directory"; WHEELS=$2; shift 2 ;;
        --skip) (($# >= 2)) || fail_args "--skip needs step names"; SKIP=$2; shift 2 ;;
        --dry-run) DRY_RUN=1; shift ;;
        -h | --help) usage; exit 0 ;;
        *) fail_args "unknown argument '$1'" ;;
    esac
done
[[ $BUDGET =~ ^[1-9][0-9]*$ ]] || fail_args "--budget must be a whole number of seconds > 0, got '$BUDGET'"
command -v "$PY" > /dev/null || fail_args "--python: no interpreter '$PY'"
[[ $PY != */* ]] || PY=$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY")  # steps run from the repository root
for step in ${SKIP//,/ }; do
    [[ " ${STEPS[*]} " == *" $step "* ]] || fail_args "--skip: unknown step '$step' (steps: ${STEPS[*]})"
done
"$PY" -c "import torch" 2> /dev/null || fail_args "--python: '$PY' cannot import torch (give the interpreter of your CUDA torch)"
mkdir -p "$OUT_DIR"
OUT_DIR=$(cd "$OUT_DIR" && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
LOG=$OUT_DIR/gpu_check.log
: > "$LOG"
: > "$WORK/steps.tsv"
DEADLINE=$(($(date +%s) + BUDGET))

summarize() {  # write gpu_check.json from the steps so far (atomically: a killed run leaves the last one)
    "$PY" - "$WORK" "$OUT_DIR/gpu_check.json" "$DRY_RUN" "$BUDGET" << 'EOF'
import json, os, sys, xml.etree.ElementTree as ET
work, dest, dry_run, budget = sys.argv[1], sys.argv[2], sys.argv[3] == "1", int(sys.argv[4])
steps = []
for line in open(os.path.join(work, "steps.tsv")):
    name, status, rc, seconds, limit, command = line.rstrip("\n").split("\t")
    step = {"name": name, "status": status, "rc": int(rc) if rc else None, "seconds": int(seconds),
            "limit_s": int(limit), "command": command}
    out = os.path.join(work, name + ".out")
    if os.path.exists(out):
        step["output_tail"] = open(out, errors="replace").read().splitlines()[-40:]
    junit = os.path.join(work, name + ".xml")
    if os.path.exists(junit):
        suites = ET.parse(junit).getroot()
        suite = suites if suites.tag == "testsuite" else suites.find("testsuite")
        step["tests"] = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
        step["failed"] = [f"{c.get('classname')}::{c.get('name')}" for c in suite.iter("testcase")
                          if c.find("failure") is not None or c.find("error") is not None]
    cases = os.path.join(os.path.dirname(dest), "gpu_smoke.jsonl")
    if name == "cases" and os.path.exists(cases):
        step["cases"] = [json.loads(line) for line in open(cases) if line.strip()]
    steps.append(step)
machine = os.path.join(work, "machine.json")
report = {"check": "gpu_check", "dry_run": dry_run, "budget_s": budget,
          "machine": json.load(open(machine)) if os.path.exists(machine) else None, "steps": steps,
          "passed": all(s["status"] in ("passed", "planned", "skipped") for s in steps),
          "incomplete": [s["name"] for s in steps if s["status"] == "incomplete"],
          "failed": [s["name"] for s in steps if s["status"] in ("failed", "timeout")]}
with open(dest + ".tmp", "w") as f:
    json.dump(report, f, indent=2)
os.replace(dest + ".tmp", dest)
EOF
}

record() {  # NAME STATUS RC SECONDS LIMIT COMMAND
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >> "$WORK/steps.tsv"
    summarize
}

run_step() {  # NAME COMMAND...: run COMMAND under `timeout` with NAME's limit (or only plan it in a dry run)
    local name=$1 limit=${LIMIT[$1]} rc=0 began status left cut=0
    shift
    left=$((DEADLINE - $(date +%s)))
    if [[ ",$SKIP," == *",$name,"* ]]; then
        record "$name" skipped "" 0 "$limit" "$*"
        return
    fi
    if ((DRY_RUN)) && [[ $name != install ]]; then
        echo "plan: $name (at most ${limit}s): $*"
        record "$name" planned "" 0 "$limit" "$*"
        return
    fi
    if ((left < MIN_STEP_S)); then
        echo "== $name: incomplete, not run: ${left}s of the budget left" | tee -a "$LOG"
        record "$name" incomplete "" 0 "$limit" "$*"
        return
    fi
    ((limit <= left)) || { limit=$left; cut=1; }
    echo "== $name (at most ${limit}s): $*" | tee -a "$LOG"
    began=$(date +%s)
    timeout --kill-after=10 "$limit" "$@" > "$WORK/$name.out" 2>&1 || rc=$?
    cat "$WORK/$name.out" >> "$LOG"
    case $rc in
        0) status=passed ;;
        124 | 137) ((cut)) && status=incomplete || status=timeout ;;
        *) status=failed ;;
    esac
    echo "== $name: $status (exit $rc, $(($(date +%s) - began))s)" | tee -a "$LOG"
    record "$name" "$status" "$rc" "$(($(date +%s) - began))" "$limit" "$*"
}

install_command() {  # the pip command of the install step: the project, and the carried wheels PY lacks
    local wheel module
    INSTALL=("$PY" -m pip install --no-deps --no-build-isolation --no-index)
    ((DRY_RUN)) && INSTALL+=(--dry-run)
    INSTALL+=(-e "$ROOT")
    for wheel in "$WHEELS"/*.whl; do
        [[ -e $wheel ]] || break
        module=$(basename "$wheel")
        module=${module%%-*}
        if "$PY" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('$module') is not None)"; then
            INSTALL+=("$wheel")
        else
            echo "install: $module is already importable; its carried wheel is left out" | tee -a "$LOG"
        fi
    done
}

"$PY" - "$WORK/machine.json" << 'EOF'
import json, platform, sys
import torch
info = {"python": platform.python_version(), "executable": sys.executable, "torch": torch.__version__,
        "cuda": torch.version.cuda, "cuda_available": torch.cuda.is_available()}
if info["cuda_available"]:
    info["gpu"] = torch.cuda.get_device_name()
try:
    import triton
    info["triton"] = triton.__version__
except ImportError:
    info["triton"] = None
json.dump(info, open(sys.argv[1], "w"))
EOF

if ((DRY_RUN)); then  # the limits of the steps that would run, plus a 10% margin, must fit the budget
    planned=0
    for step in "${STEPS[@]}"; do [[ ",$SKIP," == *",$step,"* ]] || planned=$((planned + LIMIT[$step])); done
    if ((planned + planned / 10 > BUDGET)); then
        echo "gpu_check: the steps' limits add up to ${planned}s, over --budget ${BUDGET}s with a 10% margin" >&2
        exit 2
    fi
    echo "plan: the steps' limits add up to ${planned}s of the ${BUDGET}s budget"
fi

install_command
run_step install "${INSTALL[@]}"

PYTEST=("$PY" -m pytest -q -p no:cacheprovider -m gpu)
SMOKE=tests/gnnsys/test_gpu_smoke.py
cd "$ROOT"
export PYTHONUNBUFFERED=1
run_step smoke "${PYTEST[@]}" "$SMOKE" --junitxml="$WORK/smoke.xml"
rm -f "$OUT_DIR/gpu_smoke.jsonl"
run_step cases "$PY" benchmarks/gpu_smoke.py --root "$WORK/smoke-data" --out "$OUT_DIR/gpu_smoke.jsonl"
run_step gpu-tests "${PYTEST[@]}" tests --ignore="$SMOKE" --junitxml="$WORK/gpu-tests.xml"
run_step kernel-tests "$PY" -m pytest -q -p no:cacheprovider tests/storage/test_triton_gather.py \
    tests/samplers/test_gpu_sampler.py --junitxml="$WORK/kernel-tests.xml"
SANITIZER=$(command -v compute-sanitizer || true)
[[ -n $SANITIZER || ! -x /usr/local/cuda/bin/compute-sanitizer ]] || SANITIZER=/usr/local/cuda/bin/compute-sanitizer
if [[ -n $SANITIZER ]]; then
    run_step memcheck env PYTORCH_NO_CUDA_MEMORY_CACHING=1 "$SANITIZER" --tool memcheck --error-exitcode 1 \
        "$PY" -m pytest -q -p no:cacheprovider tests/storage/test_triton_gather.py -k "out_of_range or strided"
else
    echo "== memcheck: skipped, compute-sanitizer is not installed" | tee -a "$LOG"
    record memcheck skipped "" 0 0 "compute-sanitizer not found"
fi
run_step bench-gather "$PY" benchmarks/bench_gather_gpu.py --row-bytes 512,2432 --table-mib 256 \
    --batch 50000 --repeats 3 --no-plot --out "$OUT_DIR/bench_gather_gpu.json"
run_step bench-epoch "$PY" benchmarks/bench_epoch_gpu.py --root "$WORK/data" --products-scale 0.01 --epochs 2 \
    --features gpu,pinned --no-plot --out "$OUT_DIR/bench_epoch_gpu.json"

outcome=$("$PY" -c "import json, sys; r = json.load(open(sys.argv[1]))
print('failed' if r['failed'] else 'incomplete' if r['incomplete'] else 'passed')" "$OUT_DIR/gpu_check.json")
case $outcome in
    passed) echo "gpu_check: passed; results in $OUT_DIR" ;;
    incomplete) echo "gpu_check: INCOMPLETE, nothing failed but the budget ran out (see $OUT_DIR/gpu_check.json)"; exit 3 ;;
    *) echo "gpu_check: FAILED (see $OUT_DIR/gpu_check.json)"; exit 1 ;;
esac
