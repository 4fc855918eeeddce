#!/usr/bin/env bash
# benchmarks/make_gpu_wheels.sh: fetch the pure-Python wheels benchmarks/gpu_check.sh installs on a GPU
# machine that lacks them (that machine has no network), and build the compiled ones PyG's NeighborLoader
# needs there, into a git-ignored folder carried with the tree.
#
#   bash benchmarks/make_gpu_wheels.sh [--no-peer] [DIR]      (default benchmarks/.gpu-wheels)
#
# Wheels: what importing gnnsys needs beyond torch's own dependencies and the binary packages
# gpu_check.sh assumes: torch-geometric, tqdm, and requests with urllib3, idna, charset-normalizer and
# certifi (torch_geometric imports requests); and for the tests pytest with pluggy, iniconfig and
# packaging, and pytest-timeout; pydantic with annotated-types and typing-inspection (the options'
# schema). Each at its version in constraints.txt, else at the version installed in PYTHON (default
# python3). Fails if one of these is not pure Python (py3-none-any) or the folder would exceed 64 MiB
# (what a device run carries). Also the compiled ones gnnsys imports that the GPU machine lacks,
# pydantic-core and PyYAML, as PyPI's wheels for CPython 3.12 on manylinux x86_64. Then, unless --no-peer, torch-scatter and torch-sparse built
# for CPython 3.12 and torch 2.11.x, the GPU peer's (benchmarks/peers/pyg_epoch.py --device cuda) sampling
# library, by benchmarks/make_gpu_peer_wheels.sh (a long compile the first time, then reused; see there).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
fail_args() { echo "make_gpu_wheels: $1 (usage: make_gpu_wheels.sh [--no-peer] [DIR])" >&2; exit 2; }
PEER=1
if [[ ${1:-} == --no-peer ]]; then
    PEER=0
    shift
fi
[[ ${1:-} != -* ]] || fail_args "unknown option '$1'"
(($# <= 1)) || fail_args "one DIR at most, got $# arguments"
DIR=${1:-$ROOT/benchmarks/.gpu-wheels}
PY=${PYTHON:-python3}
PACKAGES=(torch-geometric tqdm requests urllib3 idna charset-normalizer certifi pytest pluggy iniconfig packaging
          pytest-timeout pydantic annotated-types typing-inspection)
BINARY=(pydantic_core PyYAML)  # compiled, for the GPU machine's CPython 3.12
LIMIT_BYTES=$((64 << 20))

pinned() {  # NAME==VERSION: constraints.txt's pin, else the version installed in PY
    local pin
    pin=$(grep -i "^$1==" "$ROOT/constraints.txt" || true)
    [[ -n $pin ]] || pin="$1==$("$PY" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$1")"
    echo "$pin"
}
specs=()
for name in "${PACKAGES[@]}"; do specs+=("$(pinned "$name")"); done
binary=()
for name in "${BINARY[@]}"; do binary+=("$(pinned "$name")"); done
rm -rf "$DIR.tmp"
mkdir -p "$DIR.tmp"
"$PY" -m pip download -q --no-deps --only-binary=:all: --implementation py --python-version 3.10 --abi none \
    --platform any --dest "$DIR.tmp" "${specs[@]}"  # pure-Python wheels only
for wheel in "$DIR.tmp"/*; do
    [[ $wheel == *-py3-none-any.whl ]] || { echo "make_gpu_wheels: $(basename "$wheel") is not pure Python" >&2; exit 1; }
done
"$PY" -m pip download -q --no-deps --only-binary=:all: --implementation cp --python-version 3.12 \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --dest "$DIR.tmp" "${binary[@]}"
if ((PEER)); then bash "$ROOT/benchmarks/make_gpu_peer_wheels.sh" "$DIR.tmp"; fi
size=$(du -sb "$DIR.tmp" | cut -f1)
((size <= LIMIT_BYTES)) || { echo "make_gpu_wheels: $size bytes exceed the 64 MiB a device run carries" >&2; exit 1; }
rm -rf "$DIR"
mv "$DIR.tmp" "$DIR"
wheels=("$DIR"/*.whl)
echo "make_gpu_wheels: ${#wheels[@]} wheels, $size bytes in $DIR: ${wheels[*]##*/}"
