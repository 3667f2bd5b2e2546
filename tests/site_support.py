"""Helpers for the engine tests that build fixture sites: waiting on a condition, a folder's
bytes, how two built sites differ, a build whose cache folder is a tiny (full) or read-only
file system, and what Material's search indexes of a page's HTML."""
from __future__ import annotations

import contextlib
import filecmp
import shlex
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
from fixture_sites import environment


def until(condition: Callable[[], object], what: str, bound_s: float = 600) -> None:
    """Wait for `condition`; the bound only stops a test that would otherwise hang."""
    deadline = time.monotonic() + bound_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.05)


def tree(folder: Path) -> dict[str, bytes]:
    """Every file under `folder`, by relative path, with its bytes."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def kill_quietly(pids: list[int]) -> None:
    """Clean up after a test that failed with processes left (on code that leaves them)."""
    for pid in pids:
        try:
            psutil.Process(pid).kill()
        except psutil.Error:
            pass


def remove_when_unused(temp: Path, bound_s: float = 60) -> None:
    """Remove `temp`, the TMPDIR of processes a test ended, once none of them is left: a build's
    template (the forkserver) outlives it a moment, removing its pages' folders, and first writes
    and deletes a file there (tempfile's check that the folder is writable). Found by their
    environment, which every process of the build inherits; a zombie has ended."""
    def in_use() -> bool:
        for process in psutil.process_iter():
            with contextlib.suppress(psutil.Error):  # gone, a zombie, or not ours
                if process.environ().get("TMPDIR") == str(temp):
                    return True
        return False

    until(lambda: not in_use(), f"the processes whose TMPDIR is {temp} to end", bound_s)
    shutil.rmtree(temp)


def can_mount_tmpfs() -> bool:
    """A user namespace may mount a tmpfs (a small one is a full disk; a read-only one is read-only)."""
    if shutil.which("unshare") is None:
        return False
    with tempfile.TemporaryDirectory() as folder:  # the mount ends with its namespace: the folder is empty again
        return subprocess.run(["unshare", "-rm", "mount", "-t", "tmpfs", "tmpfs", folder], capture_output=True).returncode == 0


def with_cache_on_tmpfs(args: list[str], cwd: Path, cache: Path, options: str) -> subprocess.CompletedProcess:
    """Run `args` with `cache` a fresh tmpfs mounted with `options` (e.g. "size=16k", "ro"); then
    list what is left in it (stdout after a line "LEFT IN CACHE:")."""
    cache.mkdir(parents=True, exist_ok=True)
    script = (f"mount -t tmpfs -o {shlex.quote(options)} tmpfs {shlex.quote(str(cache))} && "
              f"{shlex.join(args)}; status=$?; echo 'LEFT IN CACHE:'; find {shlex.quote(str(cache))} -type f; exit $status")
    return subprocess.run(["unshare", "-rm", "sh", "-c", script], cwd=cwd, env=environment(),
                          capture_output=True, text=True, timeout=600)


DATED = {"sitemap.xml", "sitemap.xml.gz"}  # the files of two builds of one site that differ by date


def differences(cmp: filecmp.dircmp, prefix: str = "") -> Iterator[str]:
    """The relative paths that differ between the two trees `cmp` compares (present in one only, or other bytes)."""
    for name in cmp.left_only + cmp.right_only:
        yield prefix + name
    _, mismatch, errors = filecmp.cmpfiles(cmp.left, cmp.right, cmp.common_files, shallow=False)
    yield from (prefix + name for name in mismatch + errors)
    for name, sub in cmp.subdirs.items():
        yield from differences(sub, f"{prefix}{name}/")


def indexed_text(html: str) -> str:
    """The titles and text Material's search plugin keeps of `html` for its index, with its own parser."""
    from material.plugins.search.plugin import Parser

    parser = Parser()
    parser.feed(html)
    parser.close()
    return " ".join(part for section in parser.data for part in [*section.title, *section.text])
