"""Which torch device, and how many CPU cores, the lessons and tests run on.

torch is imported inside the functions: `import lessonlib` must not pull it into the build
process, which only renders pages whose results come from the cache.
"""
from __future__ import annotations

import os
import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def device() -> torch.device:
    """The build's device: CPU unless LESSONLIB_DEVICE names another (e.g. ``cuda``).

    Published numbers are built on CPU so that every build prints the same digits.
    """
    import torch

    from lessonlib.engine.config import environment_settings

    name = environment_settings().device
    dev = torch.device(name)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"LESSONLIB_DEVICE={name} but torch sees no CUDA device")
    return dev


_core_budget: int | None = None  # set by the engine in a page's process: the build's `workers`


def cpus() -> int:
    """How many processes an experiment may start: one per core it may run on, and no more than
    the build's `workers` (so `workers: 1` runs everything one process at a time). Pages that
    run side by side all get that many and the kernel shares the cores, so the cores a finished
    page frees go to the pages still running. Results must not depend on it."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return min(cores, _core_budget or cores)


def limit_cpus(budget: int) -> None:
    """The engine's worker calls this before a page runs: `cpus()` gives at most `budget`."""
    global _core_budget
    _core_budget = max(1, budget)


def flush_subnormals() -> None:
    """Compute subnormal floats (float32 below about 1.2e-38) as zero, in this thread and in
    the threads it starts from now on.

    A vanishing gradient fills the backward pass of a long sequence with them, and many CPUs
    compute on subnormals tens of times more slowly than on other floats, so without this a
    page's build time would depend on the CPU. What it changes in a result is below 1e-38.
    Every page (lessonlib.engine.worker.session.start_page) and every experiment's process calls it."""
    import torch

    torch.set_flush_denormal(True)


@contextmanager
def steady_cpu(device: torch.device | str) -> Iterator[None]:
    """On CPU: run in one thread, with subnormals flushed to zero (flush_subnormals), then
    restore the caller's thread count. Experiments run under it, also in the processes they
    start, so that neither their results nor their time depend on the CPU's thread count or
    on how fast it is at subnormals.

    The lessons' models are tiny (hidden 32-64): a second thread only adds synchronisation to
    every small op.
    """
    import torch

    if torch.device(device).type != "cpu":
        yield
        return
    flush_subnormals()
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class _CallableModule(types.ModuleType):
    """`lessonlib.device()` is the device, and `lessonlib.device.cpus()` and the rest are this
    module's functions: `import lessonlib` binds this module, which can be called."""

    def __call__(self) -> torch.device:
        return device()


sys.modules[__name__].__class__ = _CallableModule
