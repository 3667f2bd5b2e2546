"""How many CPU cores a page's experiments may use: the engine sets the budget in each page's
process (the build's `workers`), and lesson code asks `cpus()` (also as lessonlib.device.cpus)."""
from __future__ import annotations

import os

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
