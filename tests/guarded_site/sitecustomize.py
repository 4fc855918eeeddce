"""Installs tests/distributed_guard.py in a Python process started with
GNNSYS_GUARD_BACKEND set (the workers of a test under `guarded_workers`)."""

import os
import sys

if os.environ.get("GNNSYS_GUARD_BACKEND"):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    from tests.distributed_guard import install

    install(os.environ["GNNSYS_GUARD_BACKEND"])
