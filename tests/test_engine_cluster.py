"""Pages on a Dask cluster (LESSONLIB_SCHEDULER): cached for a local build to serve, the same
failures at the same lines, and no page's process left when the build stops or a worker is lost
(test_engine_doors compares the site byte for byte with a local build's).

One real LocalCluster serves the module: two worker processes, non-daemonic (a daemonic one
cannot start a page's process), and a page whose worker is lost runs once more, then fails.
"""
from __future__ import annotations

import contextlib
import http.server
import os
import signal
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import dask
import joblib
import psutil
import pytest
import torch
from distributed import Client, LocalCluster
from distributed.scheduler import KilledWorker
from fault_pages import FAULTS
from fixture_sites import GOOD, LESSONLIB, environment, make_site
from site_support import gone, kill_quietly, until

from lessonlib.engine.builder import cluster
from lessonlib.engine.builder.page import execute_page
from lessonlib.engine.builder.pool import PageJob, Task
from lessonlib.engine.config import SCHEDULER, Settings
from lessonlib.engine.worker import cluster_calls
from lessonlib.engine.worker.blocks import parse_page
from lessonlib.engine.worker.errors import LessonError, SetupError
from lessonlib.experiments import caesar, memory_task
from lessonlib.experiments import language_model as lm
from lessonlib.models import seq2seq

pytestmark = pytest.mark.never_reused  # processes, threads and a real cluster: each run judges afresh
CLUSTER_CONFIG = {"distributed.worker.daemon": False, "distributed.scheduler.allowed-failures": 1}
BOUND_S = 120  # stops a test that would otherwise hang; never a measure of speed
# The engine's CONNECT_SECONDS in the tests that wait for it to expire: the same path, sooner;
# long enough for a connection to this machine to be made under load.
SHORT_CONNECT_S = 1


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


def test_a_page_built_on_the_cluster_is_served_from_the_cache_to_a_local_build(tmp_path, build, client, scheduler):
    # second.md reads the engine's settings (lessonlib.device()): where pages run must not be one of its inputs
    second = "# Two\n\n```python exec\nimport lessonlib\nprint(lessonlib.device(), sum(range(10)))\n```\n"
    site = make_site(tmp_path / "site", {"index.md": "# Home\n", "good.md": GOOD, "second.md": second})
    told_before = len(client.get_events(cluster.LINES))
    on_cluster = build(site, **{SCHEDULER: scheduler})
    assert on_cluster.returncode == 0, on_cluster.stdout + on_cluster.stderr
    ran_there = {event["page"] for _, event in client.get_events(cluster.LINES)[told_before:]}
    assert ran_there == {"docs/good.md", "docs/second.md"}, ran_there  # their workers told the build their lines
    again_here = build(site).stderr
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


def _held_page(i: int, log: Path, go: Path) -> str:
    """Page i logs "+i" as it starts and "-i" as it ends, and holds until the file go/i exists."""
    return (f"```python exec timeout=3600\nimport os, time\nwith open({str(log)!r}, 'a') as f:\n    f.write('+{i}\\n')\n"
            f"while not os.path.exists({str(go / str(i))!r}):\n    time.sleep(0.05)\n"
            f"with open({str(log)!r}, 'a') as f:\n    f.write('-{i}\\n')\n```\n")


def test_a_build_runs_no_more_pages_at_once_than_the_cluster_has_threads(tmp_path, lessonlib_cli, scheduler, client):
    # the test lets the held pages go one at a time, each time once every page the build has given the
    # cluster has started: a build that gave it more than its two threads has them all running
    log, go = tmp_path / "log", tmp_path / "go"
    go.mkdir()
    site = make_site(tmp_path / "site", {f"p{i}.md": _held_page(i, log, go) for i in range(5)})

    def running() -> set[str]:
        lines = log.read_text().split() if log.exists() else []
        return {line[1:] for line in lines if line[0] == "+"} - {line[1:] for line in lines if line[0] == "-"}

    def given() -> int:
        """The build's pages that the scheduler holds and that have not finished."""
        return client.run_on_scheduler(lambda dask_scheduler: sum(
            str(key).startswith("lessonlib-") and ts.state not in ("memory", "erred", "forgotten")
            for key, ts in dask_scheduler.tasks.items()))

    with ThreadPoolExecutor(1) as build:
        run = build.submit(lessonlib_cli, site, "run", *(f"docs/p{i}.md" for i in range(5)), **{SCHEDULER: scheduler})
        try:
            for _ in range(5):
                until(lambda: 0 < len(running()) == given(), "every page given to the cluster to start", BOUND_S)
                assert len(running()) <= 2, log.read_text()  # two one-thread workers
                page = min(running())
                (go / page).touch()
                until(lambda: f"-{page}" in log.read_text().split(), f"page {page} to end", BOUND_S)
        finally:  # a failed test lets every page go: the build ends
            for i in range(5):
                (go / str(i)).touch()
        assert run.result(BOUND_S).returncode == 0, run.result().stderr


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


def _cli(site: Path, scheduler: str, **variables: str) -> subprocess.Popen:
    # PYTHONFAULTHANDLER: a build that hangs prints every thread's stack when _ended aborts it
    return subprocess.Popen([*LESSONLIB, "run", "docs/held.md"], cwd=site, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=environment(**{SCHEDULER: scheduler}, PYTHONFAULTHANDLER="1", **variables), text=True,
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
def test_a_stopped_build_leaves_no_page_running_on_the_cluster_and_no_folder(tmp_path, client, scheduler, stop):
    pids, temp = tmp_path / "pids", tmp_path / "temp"
    site = make_site(tmp_path / "site", {"held.md": _pid_page(pids, tmp_path / "never")})
    temp.mkdir()
    build = _cli(site, scheduler, TMPDIR=str(temp))
    try:
        until(lambda: _pids(pids), "the page to run on a worker", BOUND_S)
        build.send_signal(stop)
        _ended(build)
        (page,) = _pids(pids)
        until(lambda: gone(page), "the page's process to end with its build", BOUND_S)
        until(lambda: _nothing_processing(client), "the cluster to let go of the page", BOUND_S)
        assert not list(temp.iterdir()), "the build left a temporary folder"
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


def test_an_unreachable_scheduler_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(cluster, "CONNECT_SECONDS", SHORT_CONNECT_S)
    # the connection's own deadline alone ends the wait: the engine's outer one, 1 s later, can fire
    # first when the build's event loop stalls that long on a loaded machine (and says "did not answer")
    monkeypatch.setattr(cluster, "ANSWER_SECONDS", BOUND_S)
    (tmp_path / "docs").mkdir()
    with pytest.raises(SetupError) as info:
        execute_page(GOOD, "docs/good.md", Settings(root=tmp_path, scheduler="tcp://127.0.0.1:9"))
    assert (f"cannot reach the Dask scheduler tcp://127.0.0.1:9 within {SHORT_CONNECT_S} s (OSError: Timed out trying "
            "to connect") in str(info.value) and "\n" not in str(info.value)


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
                  refresh=False, output_limit=1024, stack_file="", temp="", environment="", cores=1, variables=())
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


@contextlib.contextmanager
def _http_server() -> Iterator[int]:
    """An HTTP server: it takes the connection, then waits for a request line that never comes."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_port
    finally:
        server.shutdown()


@contextlib.contextmanager
def _silent_peer() -> Iterator[int]:
    """A socket that takes connections (its backlog) and never reads or writes."""
    with socket.create_server(("127.0.0.1", 0)) as listening:
        yield listening.getsockname()[1]


@pytest.mark.parametrize("peer", [_http_server, _silent_peer], ids=["HTTP server", "silent peer"])
def test_a_peer_that_is_not_a_dask_scheduler_is_one_line_and_leaves_nothing_running(tmp_path, capfd, monkeypatch,
                                                                                      peer):
    monkeypatch.setattr(cluster, "CONNECT_SECONDS", SHORT_CONNECT_S)  # the engine's wait for its answer
    (tmp_path / "docs").mkdir()
    before = set(threading.enumerate())
    with peer() as port:
        error = _raised(execute_page, GOOD, "docs/good.md", Settings(root=tmp_path, scheduler=f"tcp://127.0.0.1:{port}"))
    assert isinstance(error, SetupError), error
    waited = SHORT_CONNECT_S + cluster.ANSWER_SECONDS
    assert f"tcp://127.0.0.1:{port} did not answer as a Dask scheduler does within {waited} s" in str(error)
    assert "\n" not in str(error) and "Traceback" not in capfd.readouterr().err
    until(lambda: not set(threading.enumerate()) - before, "the build's threads to end with it", BOUND_S)


def test_a_workers_address_is_one_line_naming_its_scheduler(tmp_path, client, scheduler):
    (tmp_path / "docs").mkdir()
    worker = next(iter(client.nthreads()))
    with pytest.raises(SetupError) as info:
        execute_page(GOOD, "docs/good.md", Settings(root=tmp_path, scheduler=worker))
    assert f"{worker} is a Dask worker's address; its scheduler's is {scheduler}" in str(info.value)
    assert "\n" not in str(info.value)


def _raised(function: Callable, *args: object, meanwhile: Callable[[], object] = lambda: None) -> BaseException | None:
    """What `function(*args)` raises (None if it returns), run in a thread while this one does
    `meanwhile`; the test fails if it is still running after BOUND_S, where the engine as it was
    waited forever."""
    raised = []

    def call() -> None:
        try:
            function(*args)
        except BaseException as e:  # noqa: BLE001 (the test judges it)
            raised.append(e)
        else:
            raised.append(None)

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    meanwhile()
    thread.join(BOUND_S)
    if thread.is_alive():
        pytest.fail(f"still waiting after {BOUND_S} s")
    return raised[0]


def test_a_scheduler_lost_while_the_build_waits_for_a_worker_ends_it_in_one_line(tmp_path, capfd):
    # CONNECT_SECONDS as it is: it bounds the build's first connection to this live scheduler too,
    # which a loaded machine may take seconds to make
    (tmp_path / "docs").mkdir()
    with LocalCluster(n_workers=0, processes=True, threads_per_worker=1, dashboard_address=":0") as empty:
        address = empty.scheduler_address

        def close_once_the_build_waits() -> None:
            said = []
            until(lambda: said.append(capfd.readouterr().err) or "waiting for a Dask worker to join" in "".join(said),
                  "the build to say it waits for a worker", BOUND_S)
            empty.close()

        error = _raised(execute_page, GOOD, "docs/good.md", Settings(root=tmp_path, scheduler=address),
                        meanwhile=close_once_the_build_waits)
    assert isinstance(error, SetupError), error
    assert str(error).startswith(f"the Dask scheduler at {address} was lost while the build waited for a worker "
                                 "to join") and "\n" not in str(error)


# A worker's preload: it cannot import lessonlib, as on a machine without this project's packages.
NO_LESSONLIB = """
import sys

class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == "lessonlib":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)

sys.meta_path.insert(0, Refuse())
for name in [name for name in sys.modules if name.partition(".")[0] == "lessonlib"]:
    del sys.modules[name]
"""


def test_a_worker_that_cannot_import_lessonlib_fails_the_build_in_one_line_naming_it(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "no_lessonlib.py").write_text(NO_LESSONLIB)
    with (dask.config.set(CLUSTER_CONFIG),
          LocalCluster(n_workers=1, processes=True, threads_per_worker=1, dashboard_address=":0",
                       preload=[str(tmp_path / "no_lessonlib.py")]) as bare,
          Client(bare) as bare_client):
        (worker,) = bare_client.nthreads()
        error = _raised(execute_page, GOOD, "docs/good.md", Settings(root=tmp_path, scheduler=bare.scheduler_address))
    assert isinstance(error, SetupError), error
    assert (f"the Dask worker {worker} cannot load the page docs/good.md (ModuleNotFoundError: No module named "
            "'lessonlib')") in str(error) and "\n" not in str(error)


# A page's joblib call whose call or outcome cannot cross the cluster: the call, and how its one line starts.
# Each would have left the page waiting forever inside joblib's Dask backend.
UNCROSSABLE = {
    "a result": ("delayed(returns_a_lock)(i)", "the joblib call returns_a_lock returned a lock, which cannot cross "
                 "the Dask cluster back to the page (TypeError: cannot pickle '_thread.lock' object)"),
    "an argument": ("delayed(echo)(threading.Lock())", "the joblib call echo cannot be sent to the Dask cluster "
                    "(TypeError: cannot pickle '_thread.lock' object)"),
    "an exception": ("delayed(raises_with_a_lock)(i)", "the joblib call raises_with_a_lock raised a ValueError, "
                     "which cannot cross the Dask cluster back to the page"),
    "an exception the page cannot load": ("delayed(raises_two_arguments)(i)", "the outcome of the joblib call "
                                          "raises_two_arguments came back from the Dask cluster, but the page cannot "
                                          "load it (TypeError: "),
}
JOBLIB_CALLS = """\
```python exec timeout=60
import threading
from joblib import Parallel, delayed

class TwoArguments(Exception):
    def __init__(self, a, b):
        super().__init__(f"{a} and {b}")

def returns_a_lock(i):
    return threading.Lock()

def echo(x):
    return x

def raises_with_a_lock(i):
    error = ValueError(i)
    error.lock = threading.Lock()
    raise error

def raises_two_arguments(i):
    raise TwoArguments(i, i)

print("before")
out = Parallel(n_jobs=2)(CALL for i in range(2))
```
"""


@pytest.mark.parametrize("what", UNCROSSABLE)
def test_a_joblib_call_that_cannot_cross_the_cluster_fails_its_page_at_its_line_naming_it(tmp_path, scheduler, what):
    call, message = UNCROSSABLE[what]
    (tmp_path / "docs").mkdir()
    page = JOBLIB_CALLS.replace("CALL", call)
    line = page.splitlines().index(f"out = Parallel(n_jobs=2)({call} for i in range(2))")
    error = _raised(execute_page, page, "docs/p.md", Settings(root=tmp_path, scheduler=scheduler))
    assert isinstance(error, LessonError), error
    assert str(error).splitlines()[0].startswith(f"docs/p.md:{line + 1}: TypeError: {message}"), str(error)


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
    go = tmp_path / "go"
    page = f"```python exec\nimport os, time\nwhile not os.path.exists({str(go)!r}):\n    time.sleep(0.05)\n```\n"
    with ThreadPoolExecutor(1) as build:
        run = build.submit(execute_page, page, "docs/slow.md", Settings(root=tmp_path, scheduler=scheduler))
        said = []
        until(lambda: said.append(capfd.readouterr().err) or
              f"waiting on the Dask cluster at {scheduler}: docs/slow.md on tcp://" in "".join(said),
              "the line that says where the page runs", BOUND_S)
        go.touch()  # the page, held until the build has said where it runs, ends
        run.result(BOUND_S)


def test_a_call_and_its_outcome_cross_as_bytes_and_one_that_cannot_fails_naming_the_call():
    """In this process, as on a worker (run) and in the page (_received)."""
    name, call = cluster_calls._sent(divmod, (7, 2), {})
    assert name == "divmod" and isinstance(call, bytes)
    assert cluster_calls._received(*cluster_calls.run(name, call)) == (3, 1)
    with pytest.raises(ValueError, match="invalid literal"):  # raised in the page as the call raised it
        cluster_calls._received(*cluster_calls.run(*cluster_calls._sent(int, ("x",), {})))
    with pytest.raises(TypeError, match=r"^the joblib call _thread\.allocate_lock returned a lock, which cannot cross"):
        cluster_calls.run(*cluster_calls._sent(threading.Lock, (), {}))
    with pytest.raises(TypeError, match=r"^the joblib call print cannot be sent to the Dask cluster"):
        cluster_calls.run(*cluster_calls._sent(print, (threading.Lock(),), {}))


def test_a_joblib_task_that_dask_itself_failed_is_told_to_joblib():
    """joblib's Dask backend fails the task's future, but tells joblib, which waits for it, nothing."""
    told, lost, done = [], Future(), Future()
    for future in (lost, done):
        future.add_done_callback(lambda f: cluster_calls._told_of_failure(f, told.append))
    error = KilledWorker("batch_of_run_1_calls", "tcp://10.0.0.2:4000", 1)
    lost.set_exception(error)
    done.set_result([])
    assert told == [error]


def _tiny_experiments(workers: int) -> dict:
    """Every experiment a lesson spreads over processes with joblib, on a tiny protocol: what
    each returns, as state dicts and numbers."""
    pair = seq2seq.train_both(dict(attention=False), dict(attention=True), workers=workers, steps=2, hidden=8,
                              batch_size=4, max_len=5, progress=False)
    ciphers = caesar.train_both(protocol=caesar.CaesarProtocol(digits=2, d_model=8, steps=2, batch=4), workers=workers)
    plays = lm.train_all([("rnn", 0), ("gpt", 0)], workers=workers,
                         protocol=lm.LMProtocol(steps=2, batch=2, chunk=8, eval_every=1, eval_windows=2, eval_count=4,
                                                embedding=8, sizes={"rnn": 8, "lstm": 8, "gpt": 8}, layers=1))
    sweep = memory_task.sweep(models=("rnn", "lstm"), lengths=(4,), seeds=(0,), progress=False, workers=workers,
                              protocol=memory_task.MemoryProtocol(steps=2, val_size=8, batch=4))
    assert isinstance(pair[1], seq2seq.Seq2Seq) and isinstance(ciphers["masked"].model, torch.nn.Module)
    assert isinstance(plays["gpt", 0].model, torch.nn.Module)  # a page gets live models, as before
    return {"seq2seq": [model.state_dict() for model in pair],
            "caesar": {name: (run.model.state_dict(), run.losses) for name, run in ciphers.items()},
            "language model": {key: (run.model.state_dict(), run.losses, run.position.tolist())
                               for key, run in plays.items()},
            "memory task": sweep}


@pytest.fixture(scope="module")
def one_process() -> dict:
    """What the experiments give in this process alone, for each way of spreading them to match."""
    return _tiny_experiments(workers=1)


def test_the_experiments_joblib_calls_cross_a_process_cluster_and_give_the_results_of_one_process(client, one_process):
    with joblib.parallel_config(backend=cluster_calls.ClusterBackend(client=client)):
        there = []
        assert _raised(lambda: there.append(_tiny_experiments(workers=2))) is None
    _assert_same(there[0], one_process)


def test_what_the_experiments_hand_back_from_joblib_is_plain_data_that_dask_itself_carries(client, one_process,
                                                                                           monkeypatch):
    """Each call an experiment gives joblib, as a Dask task of its own: its result comes back
    through Dask's own serialisation, as a worker spills it or sends it on (a trained GRU could
    not: "Failed to serialize [<weakref ... to 'Parameter'>]", and the course hung on a cluster)."""

    class EachADaskTask:  # stands in for joblib.Parallel
        def __init__(self, *_, **__) -> None:
            pass

        def __call__(self, calls):  # noqa: ANN001, ANN204
            futures = [client.submit(function, *args, pure=False, **kwargs) for function, args, kwargs in calls]
            return [future.result(timeout=BOUND_S) for future in futures]

    for module in (seq2seq, caesar, lm, memory_task):
        monkeypatch.setattr(module, "Parallel", EachADaskTask)
    _assert_same(_tiny_experiments(workers=2), one_process)


def _assert_same(a: object, b: object) -> None:
    if isinstance(a, torch.Tensor):
        assert torch.equal(a, b)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            _assert_same(a[key], b[key])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _assert_same(x, y)
    else:
        assert a == b
