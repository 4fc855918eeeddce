#!/usr/bin/env bash
# benchmarks/gpu_headline.sh: the headline GPU figures of gnnsys in one command, within 8 minutes on one GPU.
#
#   bash benchmarks/gpu_headline.sh [--out DIR] [--budget SECONDS] [--python PY] [--wheels DIR]
#                                   [--skip STEP[,STEP...]] [--dry-run] [-h|--help]
#
# Steps, in order, each bounded by `timeout` (its limit in seconds below; 435 s in all, which fits the
# default --budget of 480 s with a 10% margin):
#   install (15)  pip install --no-deps --no-build-isolation --no-index -e . into PY (default python3), with
#                 the carried wheels (--wheels, default benchmarks/.gpu-wheels: torch-sparse and
#                 torch-scatter for the PyG peer, and the pure-Python ones) that PY's Python can take and
#                 whose module PY cannot import yet
#   facts (10)    the machine: nvidia-smi (GPU, driver, PCIe link, clocks), CPU, memory and disk, into
#                 machine_facts.txt (GPU, CUDA, torch, Triton and the commit are in gpu_headline.json)
#   prepare (60)  the synthetic graphs, at once: products-shaped x0.25 (612K nodes, 15M edges, 512-byte
#                 rows) and papers100M-shaped x0.03 (3.3M nodes, 48M edges, 512-byte rows, 1.7 GB)
#   gather (40)   benchmarks/bench_gather_gpu.py --quick: zero-copy gathers from pinned memory against a
#                 pinned memcpy of the same bytes, per row size (kernel time and host cost apart)
#   sweep (40)    benchmarks/sweep_gather_gpu.py --quick: the gather kernel's parameters on this GPU
#   epoch-products (85), epoch-papers (85)  benchmarks/bench_epoch_gpu.py on each shape: features gpu
#                 (resident), pinned (zero-copy) and cpu-gather (the CPU-gather baseline) x the gpu and cpu
#                 samplers x fp32 and bf16-mixed, GraphSAGE 3 x 256, 15/10/5, batch 1024, 3 epochs (the
#                 first dropped); the GPU sampler's cases first; a case that would end later than 10 s
#                 inside the step's limit is recorded as not run (--time-budget), so the step ends in time
#   ssd (45)      the products shape read from the SSD tier (O_DIRECT random reads) under a cache of 10% of
#                 the rows, beside pinned and cpu-gather in the same run, GPU sampler, fp32 (same time budget)
#   pyg-peer (45) benchmarks/peers/pyg_epoch.py on the products shape with --device cuda: PyG's
#                 NeighborLoader sampling and slicing on the CPU, the same GraphSAGE on the GPU, fp32
#   summary (10)  headline_figures.json: each figure against its target (pinned <= 1.15x GPU-resident,
#                 SSD with a 10% cache <= 1.5x in-memory, gnnsys <= 0.5x PyG), with its GPU and precision
# Results under --out (default benchmarks/results/gpu_<card>/, <card> from the GPU's name, e.g. gpu_h100):
# gpu_headline.json (the machine; each step's status, exit code, seconds, command and output tail),
# gpu_headline.log (all output), machine_facts.txt, bench_gather_gpu.json, sweep_gather_gpu.json,
# epoch_products.json, epoch_papers.json, epoch_ssd.json, pyg_peer_products.json and
# headline_figures.json, each written as results arrive. A step the budget leaves no time for, or cut
# short by the budget, is "incomplete"; a step whose script is not in the checkout is "missing"
# (reported, the other steps run). Exit status 0 when every step ran and passed, 1 when a step failed
# (or ran past its own limit), 3 when none failed but some were incomplete or missing, 2 for bad
# arguments or (--dry-run) step limits that do not fit the budget. Datasets are prepared under a
# temporary folder (TMPDIR) and removed at the end. The steps run with benchmarks/gpu_steps.sh, shared
# with benchmarks/gpu_check.sh.
#
# --dry-run works on any machine, with or without CUDA: it checks the arguments, runs the install step
# with pip's --dry-run, prints every other step's command and writes gpu_headline.json with them
# "planned" (or "missing") under --out (default ./gpu-headline-out); it exits with status 2 when the
# limits of the steps not skipped, plus a 10% margin, exceed --budget.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CHECK=gpu_headline
SCRIPT=${BASH_SOURCE[0]}
STEPS=(install facts prepare gather sweep epoch-products epoch-papers ssd pyg-peer summary)
declare -A LIMIT=([install]=15 [facts]=10 [prepare]=60 [gather]=40 [sweep]=40 [epoch-products]=85
                  [epoch-papers]=85 [ssd]=45 [pyg-peer]=45 [summary]=10)
OUT_DIR=""
BUDGET=480
PRODUCTS_SCALE=0.25
PAPERS_SCALE=0.03

default_out_dir() {  # CARD (the GPU's name): benchmarks/results/gpu_<card>, or ./gpu-headline-out in a dry run
    local card
    card=$(echo "$1" | tr '[:upper:]' '[:lower:]' | sed 's/^nvidia //' | cut -d' ' -f1 | tr -cd 'a-z0-9-')
    if ((DRY_RUN)) || [[ -z $card ]]; then
        echo "$PWD/gpu-headline-out"
    else
        echo "$ROOT/benchmarks/results/gpu_$card"
    fi
}

# shellcheck source=benchmarks/gpu_steps.sh
source "$ROOT/benchmarks/gpu_steps.sh"
steps_parse_args "$@"
steps_start

DATA=$WORK/data
EPOCH=(benchmarks/bench_epoch_gpu.py --root "$DATA" --products-scale "$PRODUCTS_SCALE" --papers-scale "$PAPERS_SCALE")
TIMED=(--epochs 3 --no-plot)  # and --time-budget: 10 s inside the step's limit, so the step ends with its cases
FACTS='{ nvidia-smi; nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.max,pcie.link.width.max,'
FACTS+='clocks.max.sm,clocks.max.mem --format=csv; lscpu; free -g; df -h "$1"; } > "$2" 2>&1; cat "$2"'

install_step
run_step facts bash -c "$FACTS" facts "$WORK" "$OUT_DIR/machine_facts.txt"
script_step prepare "${EPOCH[@]}" --prepare-only --graph products --graph papers
script_step gather benchmarks/bench_gather_gpu.py --quick --out "$OUT_DIR/bench_gather_gpu.json"
script_step sweep benchmarks/sweep_gather_gpu.py --quick --out "$OUT_DIR/sweep_gather_gpu.json"
for graph in products papers; do
    script_step "epoch-$graph" "${EPOCH[@]}" "${TIMED[@]}" --time-budget $((LIMIT[epoch-$graph] - 10)) \
        --graph "$graph" --features gpu,pinned,cpu-gather --sampler gpu,cpu --precision 32,bf16-mixed \
        --out "$OUT_DIR/epoch_$graph.json"
done
script_step ssd "${EPOCH[@]}" "${TIMED[@]}" --time-budget $((LIMIT[ssd] - 10)) --graph products \
    --features ssd,pinned,cpu-gather --sampler gpu --precision 32 --cache-frac 0.1 --out "$OUT_DIR/epoch_ssd.json"
script_step pyg-peer benchmarks/peers/pyg_epoch.py "$DATA/products-$PRODUCTS_SCALE" --device cuda --epochs 2
if [[ -f $WORK/pyg-peer.out ]] && grep -q '^{' "$WORK/pyg-peer.out"; then  # its one JSON line
    grep '^{' "$WORK/pyg-peer.out" | tail -n 1 > "$OUT_DIR/pyg_peer_products.json"
fi
script_step summary benchmarks/gpu_figures.py "$OUT_DIR"
steps_finish
