"""A test-only guard around torch.distributed: no tensor reaches a backend that cannot take it.

`install(default_backend)` patches torch.distributed in this process so that

- every group is tagged with the backend the code asked for: the default
  group with the one given to init_process_group, a group from new_group
  with its `backend` (or the default group's tag when none is given), while
  the group really made is gloo (so "nccl" runs on a machine without a GPU);
- every collective and point-to-point call in WRAPPED checks its tensors
  against its group's tag and raises `GuardError` for a host tensor handed to
  an NCCL group or a CUDA tensor handed to a gloo group;
- `gnnsys.parallel.distributed.backend_for` answers `default_backend`: the workers
  believe they run on CUDA and ask for NCCL (their device stays the CPU).

A worker of `gnnsys.parallel.distributed.launch` is a new interpreter, so a test
installs the guard there through `guarded_workers()`: tests/guarded_site/
sitecustomize.py calls install() in every Python process started while it is
active. Object collectives (all_gather_object, ...) are not checked: torch
places their tensors for the backend itself.
"""

from __future__ import annotations

import inspect
import os
from contextlib import contextmanager
from pathlib import Path

import torch
import torch.distributed as dist

WRAPPED = (
    "all_reduce",
    "all_gather",
    "all_gather_into_tensor",
    "all_to_all_single",
    "all_to_all",
    "broadcast",
    "reduce",
    "reduce_scatter_tensor",
    "gather",
    "scatter",
    "send",
    "recv",
    "isend",
    "irecv",
)
ENV = "GNNSYS_GUARD_BACKEND"
SITE = Path(__file__).parent / "guarded_site"

_tags: dict[int, str] = {}  # id(process group) -> the backend the code asked for


class GuardError(AssertionError):
    """A tensor was handed to a backend that cannot take it."""


def check_tensors(name: str, backend: str, tensors) -> None:
    """GuardError when one of `tensors` cannot go to `backend` (a host tensor
    to "nccl", a CUDA tensor to "gloo")."""
    for t in tensors:
        kind = t.device.type
        if backend == "nccl" and kind != "cuda":
            raise GuardError(f"{name}: a {kind} tensor handed to an NCCL group")
        if backend == "gloo" and kind == "cuda":
            raise GuardError(f"{name}: a CUDA tensor handed to a gloo group")


def backend_of(group) -> str:
    """The backend the code asked for `group` (None: the default group)."""
    group = dist.distributed_c10d._get_default_group() if group is None else group
    return _tags[id(group)]


def _tensors(values):
    for v in values:
        if isinstance(v, torch.Tensor):
            yield v
        elif isinstance(v, list | tuple):
            yield from (t for t in v if isinstance(t, torch.Tensor))


def _checked(name: str, real):
    signature = inspect.signature(real)

    def call(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        check_tensors(name, backend_of(bound.arguments.get("group")), _tensors(bound.arguments.values()))
        return real(*args, **kwargs)

    return call


def install(default_backend: str) -> None:
    """Patch torch.distributed in this process (see the module doc)."""
    import gnnsys.parallel.distributed

    real_init, real_new_group = dist.init_process_group, dist.new_group

    def init_process_group(backend=None, *args, **kwargs):
        real_init("gloo", *args, **kwargs)
        _tags[id(dist.distributed_c10d._get_default_group())] = backend or "gloo"

    def new_group(ranks=None, timeout=None, backend=None, *args, **kwargs):
        group = real_new_group(ranks, timeout, "gloo", *args, **kwargs)
        _tags[id(group)] = backend or backend_of(None)
        return group

    dist.init_process_group, dist.new_group = init_process_group, new_group
    for name in WRAPPED:
        setattr(dist, name, _checked(name, getattr(dist, name)))
    gnnsys.parallel.distributed.backend_for = lambda device: default_backend


@contextmanager
def guarded_workers(monkeypatch, backend: str = "nccl"):
    """Every Python process started inside runs under install(backend)."""
    monkeypatch.setenv(ENV, backend)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(SITE), os.environ.get("PYTHONPATH")])))
    yield
