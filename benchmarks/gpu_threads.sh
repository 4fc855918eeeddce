#!/usr/bin/env bash
# benchmarks/gpu_threads.sh: torch's intra-op threads, numba's threads and the loader's background threads
# measured together on 2, 4, 8 and 16 cores of the GPU machine (16 cores), in about a minute.
#
#   bash benchmarks/gpu_threads.sh [--out DIR] [--budget SECONDS] [--python PY] [--wheels DIR]
#                                  [--skip STEP[,STEP...]] [--dry-run] [-h|--help]
#
# Steps, in order, each bounded by `timeout` (its limit in seconds below; 80 s in all, which fits the
# default --budget of 90 s with a 10% margin; the run itself should take under a minute: on a loaded
# 2-core CPU, prepare took 3 s and cores-2 13 s; cores-2 has room for numba compiling a kernel its
# cache lacks, which benchmarks/gpu_headline.sh run first on the same machine fills):
#   install (10)  as gpu_headline.sh's: pip install --no-deps --no-build-isolation --no-index -e . into PY
#                 (default python3) with the carried wheels (--wheels) PY can take and cannot import yet
#   prepare (10)  gnnsys prepare synthetic --like ogbn-arxiv --scale S --to-undirected (S from the
#                 environment's GPU_THREADS_SCALE, default 0.1: 17K nodes, 233K edges, 9 batches an epoch)
#   cores-2, cores-4, cores-8, cores-16 (20, 15, 10, 10)  benchmarks/bench_roofline.py on the first N cores
#                 this process may use (taskset), numba's threads N (NUMBA_NUM_THREADS), torch's intra-op
#                 threads N and N - 2 (at least 1: two cores left to the loader), each with the loader's
#                 background sampling and gathering threads (--prefetch 4) and without them (--prefetch
#                 0, the loader working between steps): fp32, one warm-up epoch, one timed epoch per
#                 torch thread count, each layer's time against its floor at the GEMM rates measured at
#                 that count; a count of cores over the machine's is "skipped"
#   summary (5)   benchmarks/threads_summary.py: threads_summary.json, one row per cores x prefetch x torch
#                 threads with the epoch and compute seconds, numba's threads and the loader's threads alive
# Results under --out (default ./gpu-threads-out): gpu_threads.json (the machine; each step's status, exit
# code, seconds, command and output tail), gpu_threads.log, cores-N/roofline_arxiv-S.json (bench_roofline.py's
# record, written as each precision and prefetch setting ends) and threads_summary.json. Exit status as
# gpu_headline.sh's: 0 passed, 1 a step failed or ran past its limit, 3 incomplete, 2 bad arguments or
# (--dry-run) limits over the budget. The steps run with benchmarks/gpu_steps.sh.
#
# --dry-run works on any machine: it checks the arguments, runs the install step with pip's --dry-run,
# prints every other step's command (every core count, whatever this machine has) and writes
# gpu_threads.json with them "planned"; it exits with status 2 when the limits of the steps not skipped,
# plus a 10% margin, exceed --budget.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CHECK=gpu_threads
SCRIPT=${BASH_SOURCE[0]}
CORE_COUNTS=(2 4 8 16)
STEPS=(install prepare cores-2 cores-4 cores-8 cores-16 summary)
declare -A LIMIT=([install]=10 [prepare]=10 [cores-2]=20 [cores-4]=15 [cores-8]=10 [cores-16]=10 [summary]=5)
OUT_DIR=$PWD/gpu-threads-out
BUDGET=90
SCALE=${GPU_THREADS_SCALE:-0.1}
[[ $SCALE =~ ^(0?\.[0-9]*[1-9][0-9]*|1|1\.0*)$ ]] \
    || { echo "$CHECK: GPU_THREADS_SCALE must be a scale in (0, 1], got '$SCALE'" >&2; exit 2; }

# shellcheck source=benchmarks/gpu_steps.sh
source "$ROOT/benchmarks/gpu_steps.sh"
steps_parse_args "$@"
steps_start

DATA=$WORK/arxiv-$SCALE
read -r -a CPUS <<< "$("$PY" -c 'import os; print(*sorted(os.sched_getaffinity(0)))')"
install_step
run_step prepare "$PY" -m gnnsys prepare synthetic --like ogbn-arxiv --scale "$SCALE" --to-undirected \
    --no-progress --out "$DATA"
for n in "${CORE_COUNTS[@]}"; do
    if ((!DRY_RUN && n > ${#CPUS[@]})) && [[ ",$SKIP," != *",cores-$n,"* ]]; then
        echo "== cores-$n: skipped, this process may use ${#CPUS[@]} cores" | tee -a "$LOG"
        record "cores-$n" skipped "" 0 "${LIMIT[cores-$n]}" "needs $n cores, this process may use ${#CPUS[@]}"
        continue
    fi
    cores=$(IFS=,; echo "${CPUS[*]:0:n}")
    ((n <= ${#CPUS[@]})) || cores=0-$((n - 1))  # a dry run's plan for a machine with n cores
    threads="$n,$((n > 2 ? n - 2 : 1))"
    run_step "cores-$n" taskset -c "$cores" env NUMBA_NUM_THREADS="$n" "$PY" benchmarks/bench_roofline.py "$DATA" \
        --precisions 32 --threads "$threads" --prefetch 4,0 --warmup 1 --gemm-seconds 0.05 --gemm-repeats 3 \
        --bandwidth-mib 64 --out "$OUT_DIR/cores-$n"
done
script_step summary benchmarks/threads_summary.py "$OUT_DIR"
steps_finish
