"""No process outlives its build, and none a page started outlives its page: the forkserver and
the workers end with the build on any signal, a page that leaves a process running fails for
it at the block that started it, and nothing a page starts holds the build's stdout. Workers
start from a fixed hash seed."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from fixture_sites import environment, make_site
from site_support import gone, kill_quietly, until

from lessonlib.engine.builder.page import execute_page, execute_pages
from lessonlib.engine.config import Settings
from lessonlib.engine.worker.errors import LessonError

SPINNER = """\
```python exec
import json, os, subprocess
import tempfile
sleeper = subprocess.Popen(["sleep", "1000"], start_new_session=True)
with open({temp!r}, "w") as f:
    f.write(tempfile.mkdtemp())
with open({pids!r}, "w") as f:
    json.dump({{"worker": os.getpid(), "forkserver": os.getppid(), "sleeper": sleeper.pid}}, f)
while True:
    pass
```
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGKILL], ids=lambda s: s.name)
def test_every_process_ends_with_the_build_however_it_is_ended(tmp_path, killed_build_temp, sig):
    """The forkserver, the page's process and what it started end with the build on any signal,
    and so does the pages' temporary folder, which a killed build cannot remove itself."""
    pids_file, temp_file = tmp_path / "pids.json", tmp_path / "temp.txt"
    site = make_site(tmp_path / "site", {"index.md": "# Home\n",
                                         "spin.md": SPINNER.format(pids=str(pids_file), temp=str(temp_file))})
    # a process: the signal ends the build itself
    def default_action() -> None:  # even where the suite inherited SIGHUP ignored (nohup); SIGKILL has no other
        if sig != signal.SIGKILL:
            signal.signal(sig, signal.SIG_DFL)

    build = subprocess.Popen([sys.executable, "-m", "mkdocs", "build"], cwd=site, env=environment(TMPDIR=str(killed_build_temp)),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=default_action)
    pids: list[int] = []
    try:
        until(lambda: pids_file.exists() and pids_file.read_text(), "the page to start spinning")
        pids = list(json.loads(pids_file.read_text()).values())
        build.send_signal(sig)
        # ended by the signal, not by the spinning block's timeout
        assert build.wait() in (-sig, 128 + sig), f"the build exited with {build.returncode}"
        until(lambda: all(map(gone, pids)), "the forkserver, the worker and its sleeper to end", bound_s=60)
        assert not Path(temp_file.read_text()).exists(), "the page's temporary folder was left"
        assert not list(killed_build_temp.glob("lessonlib-pages-*")), "the pages' temporary folder was left"
    finally:
        kill_quietly(pids)


LINGERING_BUILD = """\
import os, signal, tempfile, threading, time
from lessonlib.engine.builder import pool
from lessonlib.engine.config import pages_temp_prefix
from lessonlib.engine.worker import lifetime

tempfile.mkdtemp(prefix=pages_temp_prefix(os.getpid()))
release = threading.Event()
starter = threading.Thread(target=lambda: (pool.start_template(), release.wait()))
starter.start()
def guarded(pid):  # the forkserver's guard catches SIGTERM
    with open(f"/proc/{pid}/status") as f:
        caught = next(line.split()[1] for line in f if line.startswith("SigCgt:"))
    return int(caught, 16) >> (signal.SIGTERM - 1) & 1
while not (lifetime.forkserver_pid() and guarded(lifetime.forkserver_pid())):
    time.sleep(0.01)
print(lifetime.forkserver_pid(), flush=True)
release.set()
starter.join()  # the kernel tells the forkserver now, while this thread lives on
time.sleep(1)
os._exit(0)  # then the build ends without removing its folder, as a killed one does
"""


def test_a_build_whose_last_thread_ends_after_the_forkserver_is_told_still_has_its_folder_removed(killed_build_temp):
    """The kernel tells the forkserver when the build's thread that started it ends (a Dask
    worker's keeper thread); a killed build's other threads may end a moment later. The
    forkserver waits for the build to be gone, then removes its pages' folder."""
    build = subprocess.run([sys.executable, "-c", LINGERING_BUILD], env=environment(TMPDIR=str(killed_build_temp)),
                           capture_output=True, text=True, timeout=120)
    assert build.returncode == 0, build.stderr
    forkserver = int(build.stdout)
    until(lambda: gone(forkserver), "the forkserver to end", bound_s=60)
    assert not list(killed_build_temp.glob("lessonlib-pages-*")), "the build's pages' folder was left"


def test_a_process_left_in_a_new_session_fails_the_page_and_holds_no_output_of_the_build(tmp_path):
    pid_file = tmp_path / "sleeper"
    page = (f"# Leaves one\n\n```python exec\nimport subprocess\np = subprocess.Popen(['sleep', '1000'], "
            f"start_new_session=True)\nopen({str(pid_file)!r}, 'w').write(str(p.pid))\n```\n")
    site = make_site(tmp_path / "site", {"index.md": "# Home\n", "leaves.md": page})
    try:
        # a process, with capture_output: a process that held the build's stdout or stderr would hold this call
        result = subprocess.run([sys.executable, "-m", "mkdocs", "build"], cwd=site, env=environment(),
                                capture_output=True, text=True, timeout=120)
        pid = int(pid_file.read_text())
        assert result.returncode != 0
        assert f"docs/leaves.md:3: this block left process {pid} running (sleep 1000)" in result.stderr, result.stderr
        assert gone(pid)
    finally:
        kill_quietly([int(pid_file.read_text())] if pid_file.exists() else [])


def test_a_multiprocessing_child_left_running_fails_its_block_at_once(tmp_path):
    (tmp_path / "docs").mkdir()
    page = textwrap.dedent("""\
        ```python exec
        x = 1
        ```

        ```python exec
        import multiprocessing, time
        child = multiprocessing.Process(target=time.sleep, args=(1000,))
        child.start()
        print(child.pid)
        ```

        ```python exec
        y = 2
        ```
        """)
    with pytest.raises(LessonError) as info:
        execute_page(page, "docs/p.md", Settings(root=tmp_path, timeout=30))
    left = re.match(r"docs/p.md:5: this block left process (\d+) running", str(info.value))
    assert left, str(info.value)
    assert left.group(1) + "\n" == info.value.outputs_before[1].text  # the child's pid, as the block printed it
    assert gone(int(left.group(1)))


def test_a_page_may_start_a_forkserver_of_its_own_which_ends_with_the_page(tmp_path):
    (tmp_path / "docs").mkdir()
    page = textwrap.dedent("""\
        ```python exec
        import multiprocessing, multiprocessing.forkserver
        with multiprocessing.get_context("forkserver").Pool(1) as pool:
            print(pool.map(abs, [-2]))
        print(multiprocessing.forkserver._forkserver._forkserver_pid)
        ```
        """)
    result = execute_page(page, "docs/p.md", Settings(root=tmp_path, timeout=60))
    printed, pid = result.outputs.blocks[0].text.split()
    assert printed == "[2]"
    assert gone(int(pid))  # not reported as left running, and ended with the page


def test_forkserver_pid_is_the_parent_of_what_the_forkserver_starts():
    script = textwrap.dedent("""\
        import multiprocessing, time, psutil
        from lessonlib.engine.worker import lifetime
        before = lifetime.forkserver_pid()
        child = multiprocessing.get_context("forkserver").Process(target=time.sleep, args=(60,))
        child.start()
        print(before, psutil.Process(child.pid).ppid() == lifetime.forkserver_pid())
        child.kill()
        """)
    # a process of its own: this one's forkserver is the pages' template, started with what they preload
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["None", "True"], done.stderr


def test_a_block_that_kills_the_forkserver_does_not_stop_its_page_or_the_next(tmp_path):
    (tmp_path / "docs").mkdir()
    killer = "```python exec\nimport os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n```\n\n```python exec\nprint('on')\n```\n"
    after = "```python exec\nprint('next page')\n```\n"
    a, b = execute_pages([(killer, "docs/a.md"), (after, "docs/b.md")], Settings(root=tmp_path, workers=1))
    assert not isinstance(a, LessonError), str(a)
    assert a.outputs.blocks[1].text == "on\n" and b.outputs.blocks[0].text == "next page\n"


def test_sets_of_strings_print_the_same_on_every_build(tmp_path, lessonlib_cli):
    page = "```python exec\nprint(hash('lessonlib'), list({'apple', 'banana', 'cherry', 'date', 'elder', 'fig'}))\n```\n"
    site = make_site(tmp_path, {"seed.md": page})
    runs = [lessonlib_cli(site, "run", "docs/seed.md", LESSONLIB_REFRESH="1") for _ in range(2)]
    printed = [r.stdout.split("\n", 2)[1] for r in runs]
    # a process: the hash seed is set as an interpreter starts
    expected = subprocess.run([sys.executable, "-c", page.split("\n")[1]], capture_output=True, text=True,
                              env={**os.environ, "PYTHONHASHSEED": "0"}).stdout.strip()
    assert printed == [expected, expected], (printed, expected)
