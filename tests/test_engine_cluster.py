"""Pages on a Dask cluster (LESSONLIB_SCHEDULER): the same site as a local build, the same
failures at the same lines, and no page's process left when the build stops or a worker is lost.

One real LocalCluster serves the module: two worker processes, non-daemonic (a daemonic one
cannot start a page's process), and a page whose worker is lost runs once more, then fails.
"""
from __future__ import annotations

import filecmp
import itertools
import os
import signal
import subprocess
import threading
from pathlib import Path
from types import SimpleNamespace

import dask
import psutil
import pytest
from distributed import Client, LocalCluster
from fixture_sites import GOOD, LESSONLIB, environment, make_site
from site_support import gone, kill_quietly, until
from test_engine_doors import DATED, _differences
from test_engine_faults import FAULTS

from lessonlib.engine.build import cluster
from lessonlib.engine.build.page import execute_page
from lessonlib.engine.build.pool import PageJob, Task
from lessonlib.engine.config import SCHEDULER, Settings
from lessonlib.engine.worker.blocks import parse_page
from lessonlib.engine.worker.errors import LessonError, SetupError

pytestmark = pytest.mark.never_reused  # processes, threads and a real cluster: each run judges afresh
CLUSTER_CONFIG = {"distributed.worker.daemon": False, "distributed.scheduler.allowed-failures": 1}
BOUND_S = 120  # stops a test that would otherwise hang; never a measure of speed


@pytest.fixture(scope="module")
def client():
    with (dask.config.set(CLUSTER_CONFIG),
          LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=":0") as cluster,
          Client(cluster) as client):
        yield client


@pytest.fixture
def scheduler(client) -> str:
    """The cluster's address, once both workers are up (a test may have killed one)."""
    client.wait_for_workers(2, timeout=BOUND_S)
    return client.scheduler.address


def test_a_site_built_on_the_cluster_is_byte_identical_to_a_local_one_and_shares_its_cache(tmp_path, build, scheduler):
    # second.md reads the engine's settings (lessonlib.device()): where pages run must not be one of its inputs
    second = "# Two\n\n```python exec\nimport lessonlib\nprint(lessonlib.device(), sum(range(10)))\n```\n"
    pages = {"index.md": "# Home\n", "good.md": GOOD, "second.md": second}
    here, there = make_site(tmp_path / "here", pages), make_site(tmp_path / "there", pages)
    assert build(here).returncode == 0
    on_cluster = build(there, **{SCHEDULER: scheduler})
    assert on_cluster.returncode == 0, on_cluster.stdout + on_cluster.stderr
    differing = set(_differences(filecmp.dircmp(here / "site", there / "site")))
    assert differing <= DATED, differing - DATED
    again_here = build(there).stderr
    assert "docs/good.md: from cache" in again_here and "docs/second.md: from cache" in again_here, again_here


def test_pages_joblib_calls_run_on_the_cluster_even_with_every_thread_holding_a_page(tmp_path, lessonlib_cli, scheduler,
                                                                                        client):
    # two pages on two one-thread workers: a page that kept its thread would leave its jobs none
    pids = tmp_path / "pids"
    page = ("```python exec timeout=60\nimport os\nfrom joblib import Parallel, delayed\n"
            f"ran = [os.getpid(), *set(Parallel(n_jobs=2)(delayed(os.getpid)() for _ in range(8)))]\n"
            f"with open({str(pids)!r}, 'a') as f:\n    f.write(' '.join(map(str, ran)) + '\\n')\n```\n")
    site = make_site(tmp_path / "site", {"a.md": page, "b.md": page})
    run = lessonlib_cli(site, "run", "docs/a.md", "docs/b.md", **{SCHEDULER: scheduler})
    assert run.returncode == 0, run.stderr
    workers = set(client.run(os.getpid).values())
    ran = pids.read_text().splitlines()
    assert len(ran) == 2
    for line in ran:
        page_process, *jobs = map(int, line.split())  # a page runs in a process of its own, its jobs on the workers
        assert jobs and set(jobs) <= workers and page_process not in workers, (line, workers)


def test_a_build_runs_no_more_pages_at_once_than_the_cluster_has_threads(tmp_path, lessonlib_cli, scheduler):
    # each page appends "+" as it starts and "-" as it ends, the order they happened in, and holds
    # until a third page has started (or 5 s): on a build that starts more, three would overlap
    log = tmp_path / "log"
    page = (f"```python exec\nimport time\nwith open({str(log)!r}, 'a') as f:\n    f.write('+')\n"
            "deadline = time.monotonic() + 5\n"
            f"while open({str(log)!r}).read().count('+') < 3 and time.monotonic() < deadline:\n    time.sleep(0.05)\n"
            f"with open({str(log)!r}, 'a') as f:\n    f.write('-')\n```\n")
    site = make_site(tmp_path / "site", {f"p{i}.md": page for i in range(5)})
    run = lessonlib_cli(site, "run", *(f"docs/p{i}.md" for i in range(5)), **{SCHEDULER: scheduler})
    assert run.returncode == 0, run.stderr
    at_once = list(itertools.accumulate(1 if c == "+" else -1 for c in log.read_text()))
    assert len(at_once) == 10 and max(at_once) <= 2, log.read_text()  # two one-thread workers


@pytest.mark.parametrize("fault", ["os._exit(3)", "swallowed timeout"])
def test_a_failing_page_names_the_line_a_local_build_names(tmp_path, scheduler, fault):
    (tmp_path / "docs").mkdir()
    errors = []
    for where in (None, scheduler):
        with pytest.raises(LessonError) as info:
            execute_page(FAULTS[fault][0], "docs/fault.md", Settings(root=tmp_path, scheduler=where))
        errors.append(str(info.value))
    assert errors[1] == errors[0] and errors[0].startswith(f"docs/fault.md:{FAULTS[fault][1]}: ")


def _pid_page(pids: Path, go: Path) -> str:
    """A page that appends its process's pid to `pids`, then waits until `go` exists (its time
    limit far past the tests' bound: only what the test does may end it)."""
    return (f"```python exec timeout=3600\nimport os, time\nwith open({str(pids)!r}, 'a') as f:\n    f.write(f'{{os.getpid()}}\\n')\n"
            f"while not os.path.exists({str(go)!r}):\n    time.sleep(0.05)\nprint('page done')\n```\n")


def _pids(file: Path) -> list[int]:
    return [int(p) for p in file.read_text().split()] if file.exists() and file.read_text().endswith("\n") else []


def _ctrl_c_as_on_a_terminal() -> None:
    """In the build's process, before it starts: SIGINT's default action. A shell without job
    control starts a background command with SIGINT ignored, and every process under it inherits
    that (a suite started with `&` or nohup): the build would never see the SIGINT sent to it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _cli(site: Path, scheduler: str) -> subprocess.Popen:
    # PYTHONFAULTHANDLER: a build that hangs prints every thread's stack when _ended aborts it
    return subprocess.Popen([*LESSONLIB, "run", "docs/held.md"], cwd=site, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=environment(**{SCHEDULER: scheduler}, PYTHONFAULTHANDLER="1"), text=True,
                            preexec_fn=_ctrl_c_as_on_a_terminal)


def _ended(build: subprocess.Popen) -> tuple[str, str]:
    """The build's stdout and stderr once it exits; a build still running after BOUND_S fails
    the test with its threads' stacks."""
    try:
        return build.communicate(timeout=BOUND_S)
    except subprocess.TimeoutExpired:
        running = build.poll() is None
        if running:
            build.send_signal(signal.SIGABRT)
        try:
            said = build.communicate(timeout=BOUND_S)[1][-20000:]
        except subprocess.TimeoutExpired:
            said = "(nothing: another process holds its output open)"
        pytest.fail(f"the build {'did not exit' if running else 'exited but its output stayed open'} within {BOUND_S} s; "
                    f"its stacks:\n{said}")


def _told(client: Client, line: int) -> int:
    """How often a worker told a build that docs/held.md started `line`."""
    return sum(1 for _, told in client.get_events(cluster.LINES) if told["page"] == "docs/held.md" and told["line"] == line)


def _nothing_processing(client: Client) -> bool:
    return not any(keys for keys in client.processing().values())


# SIGTERM ends the build at once (the scheduler sees its client go); SIGINT makes it cancel its futures
@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stopped_build_leaves_no_page_running_on_the_cluster(tmp_path, client, scheduler, stop):
    pids = tmp_path / "pids"
    site = make_site(tmp_path / "site", {"held.md": _pid_page(pids, tmp_path / "never")})
    build = _cli(site, scheduler)
    try:
        until(lambda: _pids(pids), "the page to run on a worker", BOUND_S)
        build.send_signal(stop)
        _ended(build)
        (page,) = _pids(pids)
        until(lambda: gone(page), "the page's process to end with its build", BOUND_S)
        until(lambda: _nothing_processing(client), "the cluster to let go of the page", BOUND_S)
    finally:
        kill_quietly([build.pid, *_pids(pids)])


class _Cluster:
    """Stands in for a Client in _let_go: one that answers at once, or never."""

    def __init__(self, answers: bool):
        self.answers, self.closed = answers, False

    def cancel(self, futures: list) -> None:
        if not self.answers:
            threading.Event().wait()

    def run(self, function, *args, **options) -> None:
        pass

    def close(self) -> None:
        self.closed = True


def test_a_stopped_build_waits_a_bounded_time_for_a_cluster_that_never_answers():
    running = [SimpleNamespace(key="lessonlib-page")]
    answering, deaf = _Cluster(answers=True), _Cluster(answers=False)
    assert cluster._let_go(answering, running, BOUND_S) and answering.closed
    assert not cluster._let_go(deaf, running, 0.1) and not deaf.closed


def _kill_its_worker(client: Client, page: int) -> str:
    """SIGKILL the Dask worker process the page's process runs under; its address."""
    workers = {pid: address for address, pid in client.run(os.getpid, on_error="ignore").items()}  # one may be restarting
    (worker,) = [p.pid for p in psutil.Process(page).parents() if p.pid in workers]
    os.kill(worker, signal.SIGKILL)
    return workers[worker]


def test_a_page_whose_worker_is_lost_runs_once_more_elsewhere(tmp_path, client, scheduler):
    pids, go = tmp_path / "pids", tmp_path / "go"
    site = make_site(tmp_path / "site", {"held.md": _pid_page(pids, go)})
    build = _cli(site, scheduler)
    try:
        until(lambda: _pids(pids), "the page to run on a worker", BOUND_S)
        _kill_its_worker(client, _pids(pids)[0])
        until(lambda: len(_pids(pids)) == 2, "the page to run again on another worker", BOUND_S)
        until(lambda: gone(_pids(pids)[0]), "the lost worker's page to end with it", BOUND_S)
        go.write_text("")
        out, err = _ended(build)
        assert build.returncode == 0 and "page done" in out, err
    finally:
        kill_quietly([build.pid, *_pids(pids)])


def test_a_page_whose_worker_is_lost_twice_fails_naming_the_worker_and_the_running_line(tmp_path, client, scheduler):
    pids = tmp_path / "pids"
    first = "```python exec\nprint('first block')\n```\n\n"  # the held block starts at line 5
    site = make_site(tmp_path / "site", {"held.md": first + _pid_page(pids, tmp_path / "never")})
    build = _cli(site, scheduler)
    try:
        for attempt in (1, 2):
            until(lambda: len(_pids(pids)) == attempt, "the page to run on a worker", BOUND_S)
            until(lambda: _told(client, 5) == attempt, "the worker to tell the build its line", BOUND_S)
            lost = _kill_its_worker(client, _pids(pids)[-1])
        _, err = _ended(build)
        assert build.returncode == 1
        assert err.splitlines()[-1].startswith(f"docs/held.md:5: the Dask worker {lost} was lost while running"), err
        until(lambda: all(map(gone, _pids(pids))), "the lost workers' pages to end with them", BOUND_S)
    finally:
        kill_quietly([build.pid, *_pids(pids)])


def test_an_unreachable_scheduler_is_one_line(tmp_path):
    (tmp_path / "docs").mkdir()
    with pytest.raises(SetupError) as info:
        execute_page(GOOD, "docs/good.md", Settings(root=tmp_path, scheduler="tcp://127.0.0.1:9"))
    assert "tcp://127.0.0.1:9" in str(info.value) and "\n" not in str(info.value)


def test_a_daemonic_worker_is_one_line_naming_the_setting(tmp_path):
    (tmp_path / "docs").mkdir()
    with (dask.config.set({"distributed.worker.daemon": True}),
          LocalCluster(n_workers=1, processes=True, threads_per_worker=1, dashboard_address=":0") as daemonic):
        with pytest.raises(SetupError) as info:
            execute_page(GOOD, "docs/good.md", Settings(root=tmp_path, scheduler=daemonic.scheduler_address))
    assert "distributed.worker.daemon: False" in str(info.value) and "\n" not in str(info.value)


def test_a_worker_that_cannot_see_the_project_is_one_line(tmp_path):
    """Checked on the worker before the page starts; here as on a machine without the shared folder."""
    job = PageJob(path="docs/p.md", text="", root=str(tmp_path / "elsewhere"), source_roots=(), cache_dir=None,
                  refresh=False, output_limit=1024, stack_file="", environment="", cores=1, variables=())
    problem = cluster._unfit("tcp://10.0.0.2:4000", Task(job, parse_page("", "docs/p.md"), timeout=1))
    assert problem and f"cannot see {tmp_path / 'elsewhere' / 'docs'}" in problem and "\n" not in problem
    (tmp_path / "elsewhere" / "docs").mkdir(parents=True)
    assert cluster._unfit("tcp://10.0.0.2:4000", Task(job, parse_page("", "docs/p.md"), timeout=1)) is None


@pytest.mark.parametrize("address", ["http://127.0.0.1:8786", "nonsense", "tcp://[::1", "tcp://host:port", ""])
def test_an_address_that_is_not_a_schedulers_is_one_line_at_once(tmp_path, address, capfd):
    (tmp_path / "docs").mkdir()
    with pytest.raises(SetupError) as info:
        cluster.run_pages([], address, None).__next__()
    assert f"{address!r} is not a Dask scheduler's address" in str(info.value) and "\n" not in str(info.value)
    assert "Traceback" not in capfd.readouterr().err


def test_a_peer_that_is_not_a_dask_scheduler_is_one_line_not_a_hang(tmp_path, capfd):
    """An HTTP server accepts the connection and never answers as a scheduler would."""
    import http.server

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    (tmp_path / "docs").mkdir()
    try:
        with pytest.raises(SetupError) as info:
            execute_page(GOOD, "docs/good.md", Settings(root=tmp_path, scheduler=f"tcp://127.0.0.1:{server.server_port}"))
    finally:
        server.shutdown()
    assert f"cannot reach the Dask scheduler tcp://127.0.0.1:{server.server_port}" in str(info.value)
    assert "\n" not in str(info.value) and "Traceback" not in capfd.readouterr().err


def test_a_build_says_at_once_and_again_while_no_worker_has_joined_then_runs(tmp_path, monkeypatch, capfd):
    monkeypatch.setattr(cluster, "SAY_SECONDS", 0.5)
    (tmp_path / "docs").mkdir()
    with (dask.config.set(CLUSTER_CONFIG),
          LocalCluster(n_workers=0, processes=True, threads_per_worker=1, dashboard_address=":0") as empty):
        results = []
        build = threading.Thread(target=lambda: results.append(execute_page(
            GOOD, "docs/good.md", Settings(root=tmp_path, scheduler=empty.scheduler_address))))
        build.start()
        said = []
        until(lambda: said.extend(capfd.readouterr().err.splitlines()) or
              sum("waiting for a Dask worker to join" in line for line in said) >= 2, "two waiting lines", BOUND_S)
        empty.scale(1)
        build.join(BOUND_S)
    assert results and "hello from the good page" in results[0].markdown


def test_a_build_waiting_on_its_pages_says_which_run_where(tmp_path, client, scheduler, monkeypatch, capfd):
    monkeypatch.setattr(cluster, "SAY_SECONDS", 0.5)
    (tmp_path / "docs").mkdir()
    page = "```python exec\nimport time\ntime.sleep(3)\n```\n"
    execute_page(page, "docs/slow.md", Settings(root=tmp_path, scheduler=scheduler))
    said = capfd.readouterr().err
    assert f"waiting on the Dask cluster at {scheduler}: docs/slow.md on tcp://" in said, said
