#!/usr/bin/env bash
# Install fio (the device reference of bench_ssd_tier.py and bench_ssd_epoch.py)
# from the distribution's packages; does nothing when fio is already on PATH.
#   bash benchmarks/setup_fio.sh
set -euo pipefail
if command -v fio >/dev/null 2>&1; then
    echo "fio is installed: $(fio --version)"
    exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq fio
echo "fio is installed: $(fio --version)"
