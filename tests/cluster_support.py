"""A real multi-process Dask cluster, started as the README says: `dask scheduler`, then
`dask worker ADDRESS --nworkers 2 --nthreads 1`, non-daemonic (a daemonic worker cannot start a
page's process). The byte-comparison test builds a fixture site on it; the course's slow tier
(tests/test_course_on_cluster.py) builds the whole course there."""
from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from distributed import Client
from site_support import kill_quietly, remove_when_unused, until

BOUND_S = 120  # stops a cluster that would otherwise never start or stop; never a measure of speed


@contextlib.contextmanager
def dask_cluster(folder: Path) -> Iterator[str]:
    """A `dask scheduler` process and a `dask worker` process with two single-threaded worker
    processes; the scheduler's address, once both have joined. Their log is `folder/cluster.log`.
    Their TMPDIR is removed after them: Dask ends its worker processes without their exit handlers,
    which would remove multiprocessing's pymp-* folder (there, that of the forkserver's socket)."""
    temp = Path(tempfile.mkdtemp(prefix="cluster-"))  # short: the forkserver's socket is made in it
    env = {**os.environ, "DASK_DISTRIBUTED__WORKER__DAEMON": "False", "TMPDIR": str(temp)}
    dask = [sys.executable, "-m", "dask"]
    file, log = folder / "scheduler.json", (folder / "cluster.log").open("w")
    processes = [subprocess.Popen([*dask, "scheduler", "--scheduler-file", str(file), "--host", "127.0.0.1",
                                   "--port", "0", "--dashboard-address", ":0"], env=env, stdout=log, stderr=log)]
    try:
        until(lambda: file.exists() and file.read_text().endswith("}"), "the scheduler to start", BOUND_S)
        address = json.loads(file.read_text())["address"]
        processes.append(subprocess.Popen([*dask, "worker", address, "--nworkers", "2", "--nthreads", "1",
                                           "--memory-limit", "0"], env=env, stdout=log, stderr=log))
        with Client(address, set_as_default=False) as client:
            client.wait_for_workers(2, timeout=BOUND_S)
        yield address
    finally:
        for process in reversed(processes):
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                kill_quietly([process.pid])
        log.close()
        remove_when_unused(temp)


def pages_run_on(address: str) -> int:
    """How many pages the scheduler at `address` has seen finish: the engine's tasks (lessonlib-...)
    that reached memory, from its transition log."""
    with Client(address, set_as_default=False) as client:
        return client.run_on_scheduler(lambda dask_scheduler: len({
            key for key, _, finish, *_ in dask_scheduler.transition_log
            if str(key).startswith("lessonlib-") and finish == "memory"}))
