#!/usr/bin/env bash
# benchmarks/make_gpu_peer_wheels.sh: build the compiled wheels PyG's NeighborLoader needs on the GPU machine
# (benchmarks/peers/pyg_epoch.py --device cuda): torch-scatter and torch-sparse, CPU-only (the peer samples on the
# CPU), for CPython 3.12 against torch 2.11.0, the GPU machine's Python and torch. benchmarks/make_gpu_wheels.sh
# calls it; on its own:
#
#   bash benchmarks/make_gpu_peer_wheels.sh [DIR]      (default benchmarks/.gpu-wheels)
#
# ABI: the wheels load only into torch 2.11.x (a torch C++ extension is bound to the torch release it is compiled
# against: its C++ symbols and its _GLIBCXX_USE_CXX11_ABI) on CPython 3.12, x86-64 Linux with a glibc at least
# this machine's. The GPU machine's torch must be 2.11.x; for another release set GPU_TORCH (e.g. GPU_TORCH=2.12.0).
# Steps: a throwaway CPython 3.12 venv (PYTHON312, else python3.12, else pyenv's 3.12) with torch==$GPU_TORCH from
# PyPI (there a CUDA build, several GB to download; only its headers and CPU code are used), torch-geometric at
# constraints.txt's version, scipy, setuptools, wheel and ninja; `pip wheel` of torch-scatter and torch-sparse from
# source with FORCE_ONLY_CPU=1 (MAX_JOBS compile jobs, default 2: about 15-25 minutes on 2 cores); the wheels
# installed into that venv (--no-deps --no-index) and checked there: they import, PyG sees torch-sparse, and
# NeighborLoader samples a tiny graph through it (each seed gets all its in-neighbours, every sampled edge is the
# graph's). Checked wheels are kept in $GPU_PEER_CACHE/cp312-torch$GPU_TORCH (default GPU_PEER_CACHE
# benchmarks/.cache/gpu-peer-wheels) and reused by later runs without a rebuild (delete that folder to rebuild).
# They replace any torch_scatter/torch_sparse wheels in DIR; DIR must stay within the 64 MiB a device run
# carries, else nothing in it changes.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
GPU_TORCH=${GPU_TORCH:-2.11.0}
SCATTER=2.1.2
SPARSE=0.6.18
LIMIT_BYTES=$((64 << 20))
CACHE=${GPU_PEER_CACHE:-$ROOT/benchmarks/.cache/gpu-peer-wheels}/cp312-torch$GPU_TORCH

fail() { echo "make_gpu_peer_wheels: $1" >&2; exit "${2:-1}"; }

case ${1:-} in
    -h | --help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) fail "unknown option '$1' (usage: make_gpu_peer_wheels.sh [DIR])" 2 ;;
esac
(($# <= 1)) || fail "one DIR at most, got $# arguments" 2
DIR=${1:-$ROOT/benchmarks/.gpu-wheels}
[[ $GPU_TORCH =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || fail "GPU_TORCH must be a torch release like 2.11.0, got '$GPU_TORCH'" 2

python312() {  # the first CPython 3.12 of PYTHON312, python3.12 and pyenv's 3.12.x
    local candidates=() c
    if [[ -n ${PYTHON312:-} ]]; then
        candidates=("$PYTHON312")
    else
        candidates=(python3.12 "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python3.12)
    fi
    for c in "${candidates[@]}"; do
        if "$c" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' 2> /dev/null; then
            echo "$c"
            return
        fi
    done
    fail "no CPython 3.12 found (tried ${candidates[*]}); set PYTHON312"
}

check_wheels() {  # VENV WHEEL...: the wheels import in VENV and NeighborLoader samples a tiny graph through them
    local venv=$1
    shift
    "$venv/bin/pip" install -q --no-deps --no-index "$@"
    "$venv/bin/python" - "$GPU_TORCH" << 'EOF'
import sys

import torch
import torch_scatter
import torch_sparse
import torch_geometric.typing
from torch_geometric.data import Data
from torch_geometric.loader import NeighborLoader

assert torch.__version__.split("+")[0] == sys.argv[1], f"torch {torch.__version__}, expected {sys.argv[1]}"
assert torch_geometric.typing.WITH_TORCH_SPARSE, "PyG does not see torch-sparse"
assert torch_scatter.scatter(torch.ones(3), torch.tensor([0, 0, 1]), reduce="sum").tolist() == [2.0, 1.0]
n = 50  # a ring: node v's in-neighbours are v-1 and v-2
v = torch.arange(n)
graph = Data(edge_index=torch.stack([torch.cat([v, v]), torch.cat([(v + 1) % n, (v + 2) % n])]), num_nodes=n)
batches = list(NeighborLoader(graph, num_neighbors=[2, 2], input_nodes=torch.arange(10), batch_size=4))
assert [b.batch_size for b in batches] == [4, 4, 2]
assert torch.equal(torch.cat([b.n_id[:b.batch_size] for b in batches]), torch.arange(10))
for b in batches:
    src, dst = b.n_id[b.edge_index]
    assert set(((dst - src) % n).tolist()) == {1, 2}, "an edge the graph does not have"
    per_seed = torch.bincount(b.edge_index[1], minlength=b.num_nodes)[:b.batch_size]
    assert per_seed.tolist() == [2] * b.batch_size, "a seed without both in-neighbours"
print(f"check: torch {torch.__version__}, torch_scatter {torch_scatter.__version__}, "
      f"torch_sparse {torch_sparse.__version__}: NeighborLoader sampled {len(batches)} batches")
EOF
}

build() {  # build the wheels in a throwaway venv, check them there, keep them in CACHE
    local py work began pyg
    py=$(python312)
    pyg=$(grep -i '^torch-geometric==' "$ROOT/constraints.txt" || echo torch-geometric)
    work=$(mktemp -d)
    trap "rm -rf '$work'" EXIT
    began=$(date +%s)
    echo "make_gpu_peer_wheels: building torch-scatter $SCATTER and torch-sparse $SPARSE for torch $GPU_TORCH with $py"
    "$py" -m venv "$work/venv"
    "$work/venv/bin/pip" install -q "torch==$GPU_TORCH" "$pyg" scipy setuptools wheel ninja
    (cd "$work" && MAX_JOBS=${MAX_JOBS:-2} FORCE_CUDA=0 FORCE_ONLY_CPU=1 "$work/venv/bin/pip" wheel --no-cache-dir \
        --no-build-isolation --no-deps --no-binary torch-scatter,torch-sparse -w "$work/wheels" \
        "torch-scatter==$SCATTER" "torch-sparse==$SPARSE")
    for wheel in "$work"/wheels/*.whl; do
        [[ $wheel == *-cp312-cp312-linux_x86_64.whl ]] || fail "$(basename "$wheel") is not a cp312 x86-64 Linux wheel"
    done
    check_wheels "$work/venv" "$work"/wheels/*.whl
    rm -rf "$CACHE.tmp"
    mkdir -p "$(dirname "$CACHE")"
    mv "$work/wheels" "$CACHE.tmp"
    rm -rf "$CACHE"
    mv "$CACHE.tmp" "$CACHE"
    echo "make_gpu_peer_wheels: built and checked in $(($(date +%s) - began)) s"
}

cached=("$CACHE"/torch_scatter-"$SCATTER"-*.whl "$CACHE"/torch_sparse-"$SPARSE"-*.whl)
if [[ -f ${cached[0]} && -f ${cached[1]} ]]; then
    echo "make_gpu_peer_wheels: reusing the checked wheels in $CACHE"
else
    build
    cached=("$CACHE"/torch_scatter-"$SCATTER"-*.whl "$CACHE"/torch_sparse-"$SPARSE"-*.whl)
fi

mkdir -p "$DIR"
kept=$(find "$DIR" -maxdepth 1 -type f ! -name 'torch_scatter-*' ! -name 'torch_sparse-*' -printf '%s\n' |
    awk '{s += $1} END {print s + 0}')
added=$(du -cb "${cached[@]}" | tail -1 | cut -f1)
((kept + added <= LIMIT_BYTES)) ||
    fail "$DIR would hold $((kept + added)) bytes, over the 64 MiB a device run carries; nothing changed"
rm -f "$DIR"/torch_scatter-*.whl "$DIR"/torch_sparse-*.whl
cp "${cached[@]}" "$DIR/"
for wheel in "${cached[@]}"; do
    echo "make_gpu_peer_wheels: ${wheel##*/}: $(stat -c %s "$wheel") bytes (for torch ${GPU_TORCH%.*}.x, CPython 3.12)"
done
echo "make_gpu_peer_wheels: $((kept + added)) bytes in $DIR"
