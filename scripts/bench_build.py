"""Authoring speed, measured side by side on the whole site in one run.

    .venv/bin/python scripts/bench_build.py [--lesson docs/lessons/X.md] [--skip-serve]

Builds, each into a scratch folder with a scratch cache:
  (a) cold: empty cache            (b) warm: no change          (c) after a prose-only edit
  (d) after editing one code block (e) floor: LESSONLIB_EXECUTE=0
then a second cold build, compared byte for byte with the first (reproducibility), and
`mkdocs serve`: seconds from a prose edit until the reloaded page shows it.
Every file it edits is restored, even when interrupted.
"""
from __future__ import annotations

import argparse
import filecmp
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATED = {"sitemap.xml", "sitemap.xml.gz"}  # MkDocs writes the build date into these
RAN = re.compile(r"lessonlib: (\S+): ran (\d+) blocks in ([\d.]+) s")


def build(cache: Path, out: Path, execute: bool = True) -> tuple[float, int, list[str]]:
    """Seconds, blocks executed, and the pages that ran."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "LESSONLIB_CACHE_DIR": str(cache)}
    env["LESSONLIB_EXECUTE"] = "1" if execute else "0"
    started = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True,
    )
    seconds = time.perf_counter() - started
    if result.returncode:
        sys.exit(f"build failed:\n{result.stderr}")
    runs = RAN.findall(result.stderr)
    return seconds, sum(int(n) for _, n, _ in runs), [page for page, _, _ in runs]


@contextmanager
def edited(path: Path, change):
    """Apply change(text) -> text to path; restore the original on exit, on Ctrl-C and on SIGTERM."""
    original = path.read_text(encoding="utf-8")
    previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    try:
        path.write_text(change(original), encoding="utf-8")
        yield
    finally:
        path.write_text(original, encoding="utf-8")
        signal.signal(signal.SIGTERM, previous)


def prose_edit(text: str) -> str:
    return text.rstrip() + "\n\nA sentence added by the build benchmark.\n"


def code_edit(text: str) -> str:
    """Add a harmless statement at the end of the page's last exec block (not the training)."""
    fences = [m for m in re.finditer(r"^( *)```python exec[^\n]*\n(.*?)^\1```", text, re.M | re.S)]
    if not fences:
        sys.exit("the lesson has no python exec block to edit")
    last = fences[-1]
    indent = last.group(1)
    return text[: last.end(2)] + f"{indent}_benchmark_edit = 1\n" + text[last.end(2) :]


def differing_files(a: Path, b: Path) -> set[str]:
    def walk(cmp: filecmp.dircmp, prefix: str):
        yield from (prefix + n for n in cmp.left_only + cmp.right_only)
        _, mismatch, errors = filecmp.cmpfiles(cmp.left, cmp.right, cmp.common_files, shallow=False)
        yield from (prefix + n for n in mismatch + errors)
        for name, sub in cmp.subdirs.items():
            yield from walk(sub, f"{prefix}{name}/")

    return set(walk(filecmp.dircmp(a, b), ""))


def serve_reload_seconds(cache: Path, lesson: Path) -> float:
    """Seconds from a prose edit until `mkdocs serve` serves the edited page."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "LESSONLIB_CACHE_DIR": str(cache)}
    env["SITE_URL"] = f"http://127.0.0.1:{port}/"  # serve mounts the site at site_url's path
    server = subprocess.Popen(
        [sys.executable, "-m", "mkdocs", "serve", "-a", f"127.0.0.1:{port}"],  # livereload: watches docs/
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    rel = lesson.relative_to(ROOT / "docs").with_suffix("").as_posix()
    url = f"http://127.0.0.1:{port}/{rel}/"
    try:
        wait_for(url, lambda body: True, timeout=600)
        with edited(lesson, prose_edit):
            started = time.perf_counter()
            wait_for(url, lambda body: "added by the build benchmark" in body, timeout=600)
            return time.perf_counter() - started
    finally:
        server.terminate()
        server.wait()


def wait_for(url: str, ready, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if ready(response.read().decode()):
                    return
        except OSError:
            pass
        time.sleep(0.1)
    sys.exit(f"timed out waiting for {url}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lesson", type=Path, default=ROOT / "docs/lessons/sequences-to-attention.md")
    parser.add_argument("--skip-serve", action="store_true")
    parser.add_argument("--serve-only", action="store_true", help="only the floor and the serve reload")
    args = parser.parse_args()
    lesson = args.lesson.resolve()
    scratch = Path(tempfile.mkdtemp(prefix="bench-build-"))
    cache = scratch / "cache"
    try:
        if args.serve_only:
            floor = build(cache, scratch / "floor", execute=False)[0]
            build(cache, scratch / "cold")
            reload = serve_reload_seconds(cache, lesson)
            print(f"mkdocs serve, prose edit -> page ready: {reload:.2f} s; floor {floor:.2f} s; ratio {reload / floor:.2f}")
            return
        rows = {}
        rows["a cold"] = build(cache, scratch / "cold")
        rows["b warm, no change"] = build(cache, scratch / "warm")
        with edited(lesson, prose_edit):
            rows["c prose edit"] = build(cache, scratch / "prose")
        with edited(lesson, code_edit):
            rows["d code edit"] = build(cache, scratch / "code")
        rows["e floor (EXECUTE=0)"] = build(cache, scratch / "floor", execute=False)

        print(f"\nWhole site, lesson edited: {lesson.relative_to(ROOT)}")
        print(f"{'build':<22}{'seconds':>9}{'blocks run':>12}  pages run")
        for name, (seconds, blocks, pages) in rows.items():
            print(f"{name:<22}{seconds:>9.2f}{blocks:>12}  {', '.join(pages) or '-'}")
        floor = rows["e floor (EXECUTE=0)"][0]
        for name in ("b warm, no change", "c prose edit", "d code edit"):
            print(f"ratio {name[0]}/e = {rows[name][0] / floor:.2f}")

        second = build(scratch / "cache2", scratch / "cold2")
        differing = differing_files(scratch / "cold", scratch / "cold2")
        print(f"\nsecond cold build: {second[0]:.2f} s; files differing from the first: "
              f"{sorted(differing) or 'none'} (allowed: dated {sorted(DATED)})")
        print("reproducible:", "yes" if differing <= DATED else f"NO: {sorted(differing - DATED)}")

        if not args.skip_serve:
            reload = serve_reload_seconds(cache, lesson)
            print(f"\nmkdocs serve, prose edit -> page ready: {reload:.2f} s; ratio to floor = {reload / floor:.2f}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
