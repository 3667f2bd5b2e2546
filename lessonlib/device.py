"""Which torch device the lessons and tests run on, and how experiments use the CPU; `cpus`, how
many cores they may use, is the engine's (lessonlib.engine.worker.cores), re-exported here.

torch is imported inside the functions: `import lessonlib` must not pull it into the build
process, which only renders pages whose results come from the cache.
"""
from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from lessonlib.engine.worker.cores import cpus

if TYPE_CHECKING:
    import torch

__all__ = ["cpus", "device", "flush_subnormals", "steady_cpu"]  # cpus: the engine's, for experiments


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


def flush_subnormals() -> None:
    """Compute subnormal floats (float32 below about 1.2e-38) as zero, in this thread and in
    the threads it starts from now on.

    A vanishing gradient fills the backward pass of a long sequence with them, and many CPUs
    compute on subnormals tens of times more slowly than on other floats, so without this a
    page's build time would depend on the CPU. What it changes in a result is below 1e-38.
    Every experiment's process calls it (each page's, in lessonlib.engine.worker.session.start_page, too)."""
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
