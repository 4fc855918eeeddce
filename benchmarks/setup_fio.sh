#!/usr/bin/env bash
# Install fio (the device reference of the SSD, packed and inference benchmarks)
# from the distribution's packages where it is not on PATH.
#   bash benchmarks/setup_fio.sh
set -euo pipefail
if ! command -v fio >/dev/null 2>&1; then
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq fio
fi
echo "fio is installed: $(fio --version)"
# fio's reference reads into huge pages, as gnnsys's read buffers do (helpers.fio):
# reserve 32 of them and mount a hugetlbfs where none is (root only; skipped otherwise).
if [ "$(id -u)" -eq 0 ]; then
    pages=$(cat /proc/sys/vm/nr_hugepages)
    if [ "$pages" -lt 32 ]; then echo 32 > /proc/sys/vm/nr_hugepages; fi
    if ! grep -q " hugetlbfs " /proc/mounts; then mkdir -p /dev/hugepages && mount -t hugetlbfs none /dev/hugepages; fi
    echo "huge pages for fio's buffers: $(cat /proc/sys/vm/nr_hugepages) reserved, hugetlbfs at $(awk '$3 == "hugetlbfs" {print $2; exit}' /proc/mounts)"
else
    echo "not root: fio's buffers stay small pages (run this script as root to reserve huge pages for them)"
fi
