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
#                 ends with its precision, GPU, torch and Triton: the SSD tier feeding the GPU through a cache
#                 in GPU memory with victim buffer and lookahead (CPU and GPU sampler), fp32, bf16-mixed,
#                 16-mixed, LABOR on the GPU sampler, the gpu-pinned sampler, a CUDA cache's gathers against
#                 x[ids], the shared cache on one rank; with two or more GPUs also data-parallel, the shared
#                 cache and GNNPipe with --workers 2 (with one GPU those are "skipped": NCCL multi-rank needs
#                 two GPUs)
#   gpu-tests (45) pytest -m gpu on the rest of tests/
#   kernel-tests (45) the Triton kernels' own tests (gather and GPU sampler), compiled and run on the GPU
#   memcheck (30) compute-sanitizer memcheck on the out-of-range and strided-id gather tests (skipped
#                 where compute-sanitizer is not installed)
#   bench-gather (20) benchmarks/bench_gather_gpu.py, short: 2 row sizes, a 256 MiB table
#   bench-epoch (40) benchmarks/bench_epoch_gpu.py, short: products x0.01, 2 epochs, fp32, gpu and pinned
#                 features x the gpu and cpu samplers; its JSON is rewritten after each case
# Results under --out (default $OUT, else ./gpu-check-out): gpu_check.json (the machine: GPU, CUDA, torch,
# Triton and the source's commit; each step's status, exit code, seconds, command and output tail;
# pytest counts and failures; the smoke cases), gpu_check.log (all output), gpu_smoke.jsonl,
# bench_gather_gpu.json and bench_epoch_gpu.json, each written as results arrive. A step the budget
# leaves no time for, or cut short by the budget rather than by its own limit, is "incomplete", not
# failed; a step whose script is not in the checkout is "missing". Exit status 0 when every step ran
# and passed, 1 when a step failed (or ran past its own limit), 3 when none failed but some were
# incomplete or missing, 2 for bad arguments or (--dry-run) step limits that do not fit the budget.
# The steps run with benchmarks/gpu_steps.sh, shared with benchmarks/gpu_headline.sh.
#
# Assumes PY has a CUDA build of torch (with the triton and the pure-Python packages it depends on),
# numpy, numba and llvmlite, scipy, pandas, and psutil and xxhash (which torch_geometric imports): binary
# packages, never carried. pymetis is optional (GNNPipe partitioning only). Carries pure-Python wheels
# (torch_geometric, tqdm and requests with its dependencies, pytest with its dependencies and
# pytest-timeout) and the PyG peer's CPython 3.12 torch-scatter and torch-sparse; a wheel PY's Python
# cannot take, or whose module PY already imports, is left out with one line saying why.
#
# --dry-run works on any machine, with or without CUDA: it checks the arguments, runs the install step
# with pip's --dry-run (pip builds the editable metadata and resolves the wheels; nothing is installed),
# prints the command of every other step and writes gpu_check.json with those steps "planned"; it exits
# with status 2 when the limits of the steps not skipped, plus a 10% margin, exceed --budget.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CHECK=gpu_check
SCRIPT=${BASH_SOURCE[0]}
STEPS=(install smoke cases gpu-tests kernel-tests memcheck bench-gather bench-epoch)
declare -A LIMIT=([install]=30 [smoke]=60 [cases]=90 [gpu-tests]=45 [kernel-tests]=45 [memcheck]=30
                  [bench-gather]=20 [bench-epoch]=40)
OUT_DIR=${OUT:-$PWD/gpu-check-out}
BUDGET=540
# shellcheck source=benchmarks/gpu_steps.sh
source "$ROOT/benchmarks/gpu_steps.sh"
steps_parse_args "$@"
steps_start

install_step
PYTEST=("$PY" -m pytest -q -p no:cacheprovider -m gpu)
SMOKE=tests/gnnsys/test_gpu_smoke.py
run_step smoke "${PYTEST[@]}" "$SMOKE" --junitxml="$WORK/smoke.xml"
rm -f "$OUT_DIR/gpu_smoke.jsonl"
script_step cases benchmarks/gpu_smoke.py --root "$WORK/smoke-data" --out "$OUT_DIR/gpu_smoke.jsonl"
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
script_step bench-gather benchmarks/bench_gather_gpu.py --row-bytes 512,2432 --table-mib 256 \
    --batch 50000 --repeats 3 --no-plot --out "$OUT_DIR/bench_gather_gpu.json"
script_step bench-epoch benchmarks/bench_epoch_gpu.py --root "$WORK/data" --products-scale 0.01 --epochs 2 \
    --time-budget $((LIMIT[bench-epoch] - 10)) \
    --features gpu,pinned --sampler gpu,cpu --precision 32 --no-plot --out "$OUT_DIR/bench_epoch_gpu.json"
steps_finish
