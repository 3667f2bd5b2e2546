"""What running pages on a Dask cluster costs, against this machine's own pool, on the same cores.

    .venv/bin/python scripts/bench_cluster.py [--pages 40] [--seconds 2] [--workers 2]

Writes a synthetic course (PAGES pages, each a pure-Python loop of about SECONDS of compute,
calibrated here first) into a temporary folder, and builds it twice with execute_pages, each
time on an empty cache folder of its own: locally with WORKERS workers, then through a
LocalCluster of WORKERS single-threaded, non-daemonic worker processes. Printed: the cluster's
start-up apart, then for each mode the time from the call that submits the pages to the last
page's result (the report line of the last page), and cluster / local. Run it on a quiet machine.
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import dask
from distributed import LocalCluster

from lessonlib.engine.builder.page import PageResult, execute_pages
from lessonlib.engine.config import Settings

LOOP = "x = 0\nfor i in range({n}):\n    x = (x * 31 + i) % 1000003\n"


def calibrated(seconds: float) -> int:
    """Loop steps that take about `seconds` here."""
    n, started = 2_000_000, time.perf_counter()
    exec(LOOP.format(n=n), {})
    return int(n * seconds / (time.perf_counter() - started))


def course(root: Path, pages: int, steps: int) -> list[tuple[str, str]]:
    """(text, path) of each page; each its own code, so each its own cache key."""
    (root / "docs").mkdir(parents=True)
    return [(f"# Page {i}\n\n```python exec\n{LOOP.format(n=steps + i)}print(x)\n```\n", f"docs/page{i:02}.md")
            for i in range(pages)]


def timed_build(sources: list[tuple[str, str]], settings: Settings) -> float:
    """Seconds from the call to the last page's result; every page must have run."""
    last = [0.0]
    started = time.perf_counter()
    results = execute_pages(sources, settings, report=lambda line: last.__setitem__(0, time.perf_counter()))
    assert all(isinstance(r, PageResult) and not r.from_cache for r in results), results
    return last[0] - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=40)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lessonlib-bench-cluster-") as folder:
        root = Path(folder)
        sources = course(root, args.pages, calibrated(args.seconds))
        local = timed_build(sources, Settings(root=root, cache_dir=root / "cache-local", workers=args.workers))
        started = time.perf_counter()
        with (dask.config.set({"distributed.worker.daemon": False}),
              LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True, dashboard_address=":0") as c):
            start_up = time.perf_counter() - started
            on_cluster = timed_build(sources, Settings(root=root, cache_dir=root / "cache-cluster",
                                                       workers=args.workers, scheduler=c.scheduler_address))
    print(f"{args.pages} pages of about {args.seconds:g} s, {args.workers} workers")
    print(f"cluster start-up: {start_up:.1f} s")
    print(f"local:   {local:.1f} s\ncluster: {on_cluster:.1f} s\ncluster / local: {on_cluster / local:.3f}")


if __name__ == "__main__":
    main()
