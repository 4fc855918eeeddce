#!/usr/bin/env bash
# benchmarks/make_gpu_wheels.sh: fetch the pure-Python wheels benchmarks/gpu_check.sh installs on a GPU
# machine that lacks them (that machine has no network), into a git-ignored folder carried with the tree.
#
#   bash benchmarks/make_gpu_wheels.sh [DIR]      (default benchmarks/.gpu-wheels)
#
# Wheels: what importing gnnsys needs beyond torch's own dependencies and the binary packages
# gpu_check.sh assumes: torch-geometric, tqdm, and requests with urllib3, idna, charset-normalizer and
# certifi (torch_geometric imports requests); and for the tests pytest with pluggy, iniconfig and
# packaging, and pytest-timeout. Each at its version in constraints.txt, else at the version installed
# in PYTHON (default python3). Fails if a wheel is not pure Python (py3-none-any) or the folder would
# exceed 64 MiB (what a device run carries).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DIR=${1:-$ROOT/benchmarks/.gpu-wheels}
PY=${PYTHON:-python3}
PACKAGES=(torch-geometric tqdm requests urllib3 idna charset-normalizer certifi pytest pluggy iniconfig packaging
          pytest-timeout)
LIMIT_BYTES=$((64 << 20))

specs=()
for name in "${PACKAGES[@]}"; do
    pin=$(grep -i "^$name==" "$ROOT/constraints.txt" || true)
    if [[ -z $pin ]]; then
        pin="$name==$("$PY" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$name")"
    fi
    specs+=("$pin")
done
rm -rf "$DIR.tmp"
mkdir -p "$DIR.tmp"
"$PY" -m pip download -q --no-deps --only-binary=:all: --implementation py --python-version 3.10 --abi none \
    --platform any --dest "$DIR.tmp" "${specs[@]}"  # pure-Python wheels only
for wheel in "$DIR.tmp"/*; do
    [[ $wheel == *-py3-none-any.whl ]] || { echo "make_gpu_wheels: $(basename "$wheel") is not pure Python" >&2; exit 1; }
done
size=$(du -sb "$DIR.tmp" | cut -f1)
((size <= LIMIT_BYTES)) || { echo "make_gpu_wheels: $size bytes exceed the 64 MiB a device run carries" >&2; exit 1; }
rm -rf "$DIR"
mv "$DIR.tmp" "$DIR"
echo "make_gpu_wheels: ${#specs[@]} wheels, $size bytes in $DIR: ${specs[*]}"
