#!/usr/bin/env bash
# benchmarks/gpu_headline.sh: the headline GPU figures of gnnsys in one command, within 8 minutes on one GPU.
#
#   bash benchmarks/gpu_headline.sh [--out DIR] [--budget SECONDS] [--python PY] [--wheels DIR]
#                                   [--skip STEP[,STEP...]] [--dry-run] [-h|--help]
#
# Steps, in order, each bounded by `timeout` (its limit in seconds below; 430 s in all, which fits the
# default --budget of 480 s with a 10% margin):
#   install (15)  pip install --no-deps --no-build-isolation --no-index -e . into PY (default python3), with
#                 the carried wheels (--wheels, default benchmarks/.gpu-wheels: torch-sparse and
#                 torch-scatter for the PyG peer, and the pure-Python ones) that PY's Python can take and
#                 whose module PY cannot import yet
#   facts (10)    the machine: nvidia-smi (GPU, driver, PCIe link, clocks), CPU, memory and disk, into
#                 machine_facts.txt (GPU, CUDA, torch, Triton and the commit are in gpu_headline.json)
#   prepare (50)  the synthetic graphs, at once: products-shaped x0.25 (612K nodes, 15M edges, 512-byte
#                 rows), products-shaped x0.1 (245K nodes, 6.2M edges) and papers100M-shaped x0.03 (3.3M
#                 nodes, 48M edges, 512-byte rows, 1.7 GB)
#   gather (30)   benchmarks/bench_gather_gpu.py --quick: zero-copy gathers from pinned memory against a
#                 pinned memcpy of the same bytes, per row size (kernel time and host cost apart)
#   sweep (20)    benchmarks/sweep_gather_gpu.py --quick: the gather kernel's parameters on this GPU
#   epoch-products (110), epoch-papers (90)  benchmarks/bench_epoch_gpu.py on each shape: features gpu
#                 (resident) and pinned (zero-copy) x the gpu and cpu samplers x fp32 and bf16-mixed,
#                 then the CPU-gather baseline (fp32 first), GraphSAGE 3 x 256, 15/10/5, batch 1024, 3
#                 epochs (the first dropped); the papers shape evaluates sampled (its validation and test
#                 nodes are 0.3% of the graph); a case that would end later than 10 s inside the step's
#                 limit is recorded as not run (--time-budget), so the step ends in time
#   ssd (50)      the products shape x0.1 read from the SSD tier under a cache of 10% of the rows, packed
#                 (each batch's rows in one sequential segment) and then by O_DIRECT random reads, after
#                 pinned and gpu features in the same run, GPU sampler, fp32, 3
#                 epochs (same time budget); its pinned and gpu cases are gnnsys's side of the PyG peer
#   pyg-peer (45) benchmarks/peers/pyg_epoch.py on the products shape x0.1 with --device cuda --workers 8:
#                 PyG's NeighborLoader sampling (8 loader processes) and slicing on the CPU, the same
#                 GraphSAGE on the GPU, fp32; a sampling epoch, then 2 training epochs (each epoch's
#                 record is printed as it ends, so a run cut short keeps the epochs it finished)
#   summary (10)  headline_figures.json: each figure against its target (pinned <= 1.15x GPU-resident,
#                 SSD with a 10% cache <= 1.5x in-memory, gnnsys <= 0.5x PyG), with its GPU and precision
# The limits come from the first run, on an H200 with 16 cores (results/gpu_h200/, seconds per step or
# case): install 4, facts 1, prepare 33 (two graphs), gather 18, sweep 9. Products x0.25 cases: the
# first 19 (compilations), then 6-7 with the GPU sampler and 12 with the CPU sampler: the 8 gpu/pinned
# cases take about 85 s, the fp32 CPU-gather case with the GPU sampler fits too. Papers x0.03: its one
# case took 47 s of which 1 s was epochs: the rest was mostly the layer-wise evaluation streaming 3.3M
# nodes (on a 2-core CPU at x0.003, layer-wise 6-9 s against 1 s sampled), hence --eval sampled there.
# SSD at x0.25 took 12 s an epoch and 50 s a case, PyG with no loader processes did not finish its
# ~150 batches in 110 s (0.7 s a batch or more, sampling in one thread): at x0.1 (20 batches an
# epoch), with 8 loader processes for PyG, both should fit their steps with room to spare.
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
declare -A LIMIT=([install]=15 [facts]=10 [prepare]=50 [gather]=30 [sweep]=20 [epoch-products]=110
                  [epoch-papers]=90 [ssd]=50 [pyg-peer]=45 [summary]=10)
OUT_DIR=""
BUDGET=480
PRODUCTS_SCALE=0.25
PAPERS_SCALE=0.03
SMALL_SCALE=0.1  # the products shape of the ssd and pyg-peer steps

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
EPOCH=(benchmarks/bench_epoch_gpu.py --root "$DATA" --papers-scale "$PAPERS_SCALE")
TIMED=(--epochs 3 --no-plot)  # and --time-budget: 10 s inside the step's limit, so the step ends with its cases
FACTS='{ nvidia-smi; nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.max,pcie.link.width.max,'
FACTS+='clocks.max.sm,clocks.max.mem --format=csv; lscpu; free -g; df -h "$1"; } > "$2" 2>&1; cat "$2"'

install_step
run_step facts bash -c "$FACTS" facts "$WORK" "$OUT_DIR/machine_facts.txt"
script_step prepare "${EPOCH[@]}" --products-scale "$PRODUCTS_SCALE,$SMALL_SCALE" --prepare-only --graph products \
    --graph papers
script_step gather benchmarks/bench_gather_gpu.py --quick --out "$OUT_DIR/bench_gather_gpu.json"
script_step sweep benchmarks/sweep_gather_gpu.py --quick --out "$OUT_DIR/sweep_gather_gpu.json"
GRID=(--features gpu,pinned,cpu-gather --sampler gpu,cpu --precision 32,bf16-mixed)
script_step epoch-products "${EPOCH[@]}" "${TIMED[@]}" --time-budget $((LIMIT[epoch-products] - 10)) \
    --products-scale "$PRODUCTS_SCALE" --graph products "${GRID[@]}" --out "$OUT_DIR/epoch_products.json"
script_step epoch-papers "${EPOCH[@]}" "${TIMED[@]}" --time-budget $((LIMIT[epoch-papers] - 10)) \
    --graph papers "${GRID[@]}" --eval sampled --out "$OUT_DIR/epoch_papers.json"
script_step ssd "${EPOCH[@]}" "${TIMED[@]}" --time-budget $((LIMIT[ssd] - 10)) --products-scale "$SMALL_SCALE" \
    --graph products --features pinned,gpu,packed,ssd --sampler gpu --precision 32 --cache-frac 0.1 \
    --out "$OUT_DIR/epoch_ssd.json"
script_step pyg-peer benchmarks/peers/pyg_epoch.py "$DATA/products-$SMALL_SCALE" --device cuda --epochs 2 \
    --workers 8
if [[ -f $WORK/pyg-peer.out ]] && grep -q '^{' "$WORK/pyg-peer.out"; then  # its last record: all, or so far
    grep '^{' "$WORK/pyg-peer.out" | tail -n 1 > "$OUT_DIR/pyg_peer_products.json"
fi
script_step summary benchmarks/gpu_figures.py "$OUT_DIR"
steps_finish
