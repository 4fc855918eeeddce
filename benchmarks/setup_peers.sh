#!/usr/bin/env bash
# Build the peer environments used by benchmarks/bench_minibatch.py, cached outside the repository.
#   DGL 2.1.0 (torch 2.2.1)                       -> $GNNSYS_PEERS/dgl
#   PyG 2.8.1 + torch-scatter/torch-sparse (src)  -> $GNNSYS_PEERS/pyg
# Usage: benchmarks/setup_peers.sh [dgl|pyg|all]   (idempotent: an env that already works is kept)
set -euo pipefail

PEERS="${GNNSYS_PEERS:-/work/.cache/gnnsys-peers}"
PYTHON="${PEERS_PYTHON:-python3}"
WHAT="${1:-all}"
mkdir -p "$PEERS"

env_ok() {  # env_ok ENV "python statement"
    [ -x "$1/bin/python" ] && "$1/bin/python" -c "$2" >/dev/null 2>&1
}

setup_dgl() {
    local env="$PEERS/dgl"
    if env_ok "$env" "import torch, dgl; from dgl.dataloading import NeighborSampler; assert dgl.__version__.startswith('2.1.0')"; then
        echo "dgl env ok: $env"; return
    fi
    rm -rf "$env"
    "$PYTHON" -m venv "$env"
    "$env/bin/pip" install --upgrade pip
    "$env/bin/pip" install torch==2.2.1 dgl==2.1.0 torchdata==0.7.1 "numpy<2" pandas pyyaml pydantic scipy psutil
    env_ok "$env" "import torch, dgl" || { echo "dgl env broken: $env" >&2; exit 1; }
    "$env/bin/python" -c "import torch, dgl; print('dgl env ready: torch', torch.__version__, 'dgl', dgl.__version__)"
}

setup_pyg() {
    local env="$PEERS/pyg"
    local torch_version="${PYG_TORCH_VERSION:-2.13.0}"
    if env_ok "$env" "import torch, torch_scatter, torch_sparse, torch_geometric; from torch_geometric.loader import NeighborLoader"; then
        echo "pyg env ok: $env"; return
    fi
    rm -rf "$env"
    "$PYTHON" -m venv "$env"
    "$env/bin/pip" install --upgrade pip setuptools wheel
    "$env/bin/pip" install "torch==$torch_version" torch_geometric==2.8.1 numpy scipy psutil ninja
    # No wheels for this torch on PyPI: compile against the installed torch (2 cores: ~5 + ~8 min).
    MAX_JOBS="${MAX_JOBS:-2}" FORCE_CUDA=0 "$env/bin/pip" install --no-build-isolation --no-cache-dir torch-scatter==2.1.2
    MAX_JOBS="${MAX_JOBS:-2}" FORCE_CUDA=0 "$env/bin/pip" install --no-build-isolation --no-cache-dir torch-sparse==0.6.18
    env_ok "$env" "import torch_scatter, torch_sparse, torch_geometric" || { echo "pyg env broken: $env" >&2; exit 1; }
    "$env/bin/python" -c "import torch, torch_geometric, torch_sparse; print('pyg env ready: torch', torch.__version__, 'pyg', torch_geometric.__version__, 'torch_sparse', torch_sparse.__version__)"
}

case "$WHAT" in
    dgl) setup_dgl ;;
    pyg) setup_pyg ;;
    all) setup_dgl; setup_pyg ;;
    *) echo "usage: $0 [dgl|pyg|all]" >&2; exit 2 ;;
esac
