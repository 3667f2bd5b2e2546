"""What the lessons' experiments cost, at two git revisions side by side, each run cold.

    .venv/bin/python scripts/bench_pages.py [--base REV] [--head REV] [--pages docs/X.md ...]
                                            [--workers-1] [--keep DIR] [--python PATH]

Each revision is checked out (`git worktree add --detach`) into a scratch folder, and its
pages run with `python -m lessonlib run --keep-going PAGE`, one page at a time, in the order
given, on a cache of the revision's own that starts empty: as a cold build runs them, a memoized
call that two pages share is computed by the first and found by the second. The runs alternate,
page by page, base then head, so that both revisions see about the same load from whatever else
the machine does; they never run at the same time. --head . runs this working tree as it is,
uncommitted edits included. By default the lesson pages (LESSONS below) run, in that list's order;
the notes pages run only when --pages names them.

Printed: per page, the seconds its run printed (`docs/X.md: ran N blocks in S s`) at each
revision; then every memoized call's `NAME: computed in S s`, the calls numbered by name in the
order they ran (with --workers-1 in page order, each under its page); then each function's
total, and the totals. Also, per page, how many printed numbers differ between the revisions
(scripts/page_runs.py compares the sections by page and line; a head page's lines are first
mapped to the base page's lines that are the same, so moved blocks still pair up; timing blocks
are never compared).

--workers-1 sets LESSONLIB_WORKERS=1 (one page at a time, each experiment in one process), the
way to measure on a machine shared with other work. --keep DIR keeps each revision's output
(base.out, base.err, head.out, head.err) for scripts/page_runs.py. Standard library only.
"""
from __future__ import annotations

import argparse
import difflib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from page_runs import ROOT, compare, seconds_per_page  # noqa: E402

LESSONS = ("docs/lessons/recurrent-networks.md", "docs/lessons/gates-and-attention.md",  # mkdocs.yml's nav order
           "docs/lessons/sequence-models.md", "docs/lessons/transformer.md", "docs/lessons/language-model.md",
           "docs/lessons/recurrence-returns.md")
COMPUTED = re.compile(r"(\S+): computed in ([\d.]+) s")
RAN = re.compile(r"(docs/\S+\.md): ran \d+ blocks in [\d.]+ s")
SWITCHES = ("LESSONLIB_REFRESH", "LESSONLIB_EXECUTE", "LESSONLIB_WORKERS", "LESSONLIB_DEVICE", "LESSONLIB_CACHE_DIR")


@dataclass
class Result:
    label: str
    revision: str
    commit: str = ""
    seconds: float = 0.0  # wall time of the whole run
    exit_code: int = 0  # the first page's that was not 0
    stdout: str = ""
    stderr: str = ""
    pages: dict[str, float] = field(default_factory=dict)
    calls: list[tuple[str, str, float]] = field(default_factory=list)  # (page or "", "NAME #k", seconds)


def git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def calls_of(stderr: str) -> list[tuple[str, str, float]]:
    """Every `NAME: computed in S s`, numbered by name, with the page whose `ran` line follows it
    (right with one page at a time; with pages side by side only the order of the lines)."""
    found, pending, seen = [], [], {}
    for line in stderr.replace("\r", "\n").splitlines():
        for name, seconds in COMPUTED.findall(line):
            short = name.removeprefix("lessonlib.experiments.").removeprefix("lessonlib.models.")
            seen[short] = seen.get(short, 0) + 1
            pending.append((f"{short} #{seen[short]}", float(seconds)))
        ran = RAN.search(line)
        if ran:
            found += [(ran.group(1), name, s) for name, s in pending]
            pending = []
    return found + [("", name, s) for name, s in pending]


def run(result: Result, folder: Path, page: str, python: str, workers_1: bool, scratch: Path) -> None:
    """Run one page at this revision, on the revision's own cache (empty before its first page),
    and add what it printed and took to `result`. A page the revision lacks (a lesson split or
    added between the two) is skipped, and its cell in the table shows "-"."""
    if not (folder / page).is_file():
        print(f"bench_pages: {result.label} ({result.revision}) has no {page}: skipped", file=sys.stderr, flush=True)
        return
    env = {k: v for k, v in os.environ.items() if k not in SWITCHES}
    env.update(LESSONLIB_CACHE_DIR=str(scratch / f"cache-{result.label}"), NO_MKDOCS_2_WARNING="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(folder), env.get("PYTHONPATH", "")])))
    if workers_1:
        env["LESSONLIB_WORKERS"] = "1"
    print(f"bench_pages: {result.label} ({result.revision}, {result.commit[:9] or 'working tree'}): {page}",
          file=sys.stderr, flush=True)
    started = time.monotonic()
    out, err = scratch / f"{result.label}.out", scratch / f"{result.label}.err"
    with out.open("w") as stdout, err.open("w") as stderr:
        code = subprocess.run([python, "-m", "lessonlib", "run", "--keep-going", page], cwd=folder,
                              env=env, stdout=stdout, stderr=stderr).returncode
    seconds = time.monotonic() - started
    result.seconds += seconds
    result.exit_code = result.exit_code or code
    printed, stderr_text = out.read_text(), err.read_text()
    result.stdout += printed
    result.stderr += stderr_text
    result.pages.update(seconds_per_page(stderr_text))
    result.calls = calls_of(result.stderr)  # numbered over all the revision's pages so far
    print(f"bench_pages: {result.label} took {seconds:.0f} s (exit {code})", file=sys.stderr, flush=True)


def table(base: Result, head: Result, pages: list[str]) -> str:
    def cell(value: float | None) -> str:
        return "-" if value is None else f"{value:.1f}"

    def ratio(a: float | None, b: float | None) -> str:
        return f"{b / a:.2f}" if a and b is not None else "-"

    out = [f"| page | {base.label} {base.commit[:9] or base.revision} (s) | "
           f"{head.label} {head.commit[:9] or head.revision} (s) | ratio |", "| --- | ---: | ---: | ---: |"]
    for page in pages:
        a, b = base.pages.get(page), head.pages.get(page)
        out.append(f"| {page} | {cell(a)} | {cell(b)} | {ratio(a, b)} |")
    total_a, total_b = sum(base.pages.values()), sum(head.pages.values())
    out.append(f"| **page time** | **{total_a:.1f}** | **{total_b:.1f}** | {ratio(total_a, total_b)} |")
    if base.seconds or head.seconds:  # not known in --report-only
        out.append(f"| wall time of the page runs, start-up included | {base.seconds:.1f} | {head.seconds:.1f} | "
                   f"{ratio(base.seconds, head.seconds)} |")

    out += ["", "| page | memoized call | base (s) | head (s) |", "| --- | --- | ---: | ---: |"]
    rows: dict[str, list] = {}  # "NAME #k" -> [page, base, head], in the order they ran
    for label, result in (("base", base), ("head", head)):
        for page, name, seconds in result.calls:
            row = rows.setdefault(name, [page, None, None])
            row[0] = row[0] or page
            row[1 if label == "base" else 2] = seconds
    by_page = {page: n for n, page in enumerate(pages)}
    for name, (page, a, b) in sorted(rows.items(), key=lambda kv: by_page.get(kv[1][0], len(pages))):
        out.append(f"| {Path(page).name if page else '?'} | {name} | {cell(a)} | {cell(b)} |")
    totals: dict[str, list[float]] = {}
    for name, (_, a, b) in rows.items():
        total = totals.setdefault(name.split(" #")[0], [0.0, 0.0])
        total[0] += a or 0.0
        total[1] += b or 0.0
    out += ["", "| function (all its calls) | base (s) | head (s) | saved (s) |", "| --- | ---: | ---: | ---: |"]
    for name, (a, b) in sorted(totals.items(), key=lambda kv: -kv[1][0]):
        out.append(f"| {name} | {a:.1f} | {b:.1f} | {a - b:.1f} |")
    a, b = sum(t[0] for t in totals.values()), sum(t[1] for t in totals.values())
    out.append(f"| **all memoized calls** | **{a:.1f}** | **{b:.1f}** | {a - b:.1f} |")
    return "\n".join(out)


def line_map(old_text: str, new_text: str) -> dict[int, int]:
    """1-based line numbers of new_text -> those of the same lines in old_text (unchanged lines only)."""
    matcher = difflib.SequenceMatcher(None, old_text.splitlines(), new_text.splitlines(), autojunk=False)
    found = {}
    for block in matcher.get_matching_blocks():
        for k in range(block.size):
            found[block.b + k + 1] = block.a + k + 1
    return found


def page_text(revision: str, page: str) -> str:
    """The page at a revision ('.': this working tree)."""
    if revision == ".":
        path = ROOT / page
        return path.read_text(encoding="utf-8") if path.is_file() else ""
    try:
        return git("show", f"{revision}:{page}") + "\n"
    except subprocess.CalledProcessError:  # the page is not at this revision
        return ""


def renumbered(output: str, pages: list[str], base_rev: str, head_rev: str) -> str:
    """head's output with each section header's page line moved to the base page's line for it, so
    that page_runs.compare pairs the sections of a page whose lines moved (an edited block keeps
    its number where its fence line is unchanged)."""
    maps = {page: line_map(page_text(base_rev, page), page_text(head_rev, page)) for page in pages}

    def move(match: re.Match) -> str:
        page, line = match.group(1), int(match.group(2))
        return f"--- {page}:{maps.get(page, {}).get(line, line + 100_000)}"  # a new line pairs with nothing

    return re.sub(r"^--- (\S+?\.md):(\d+)", move, output, flags=re.M)


def numbers_report(base: Result, head: Result, pages: list[str]) -> str:
    base_rev, head_rev = base.commit or base.revision, head.commit or head.revision
    timing = {page: timing_lines(page_text(base_rev, page)) for page in pages}
    out = ["", "| page | printed numbers compared | differing | largest relative difference | sections changed shape |",
           "| --- | ---: | ---: | ---: | ---: |"]
    for page, d in compare(base.stdout, renumbered(head.stdout, pages, base_rev, head_rev), timing).items():
        out.append(f"| {page} | {d.compared} | {len(d.differing)} | {d.largest:.3g} | {len(d.changed_shape)} |")
    return "\n".join(out)


def timing_lines(text: str) -> set[int]:
    """The (1-based) fence lines of a page's blocks marked `timing` (measurements, never compared)."""
    return {n for n, line in enumerate(text.splitlines(), 1) if re.match(r"\s*```python exec\b.*\btiming\b", line)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", default="7da5088", help="the revision to compare against (default 7da5088)")
    parser.add_argument("--head", default="HEAD", help="the revision measured (default HEAD; '.': this working tree)")
    parser.add_argument("--pages", nargs="+", default=list(LESSONS), metavar="PAGE")
    parser.add_argument("--workers-1", action="store_true", help="LESSONLIB_WORKERS=1: one process at a time")
    parser.add_argument("--keep", type=Path, help="keep each revision's stdout and stderr in this folder")
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--report-only", type=Path, metavar="DIR",
                        help="run nothing: print the tables again from what --keep DIR kept (page times, calls, "
                             "numbers; not the wall time)")
    args = parser.parse_args(argv)
    if args.report_only:
        results = []
        for label, revision in (("base", args.base), ("head", args.head)):
            commit = "" if revision == "." else git("rev-parse", "--verify", f"{revision}^{{commit}}")
            result = Result(label, revision, commit)
            result.stdout = (args.report_only / f"{label}.out").read_text()
            result.stderr = (args.report_only / f"{label}.err").read_text()
            result.pages, result.calls = seconds_per_page(result.stderr), calls_of(result.stderr)
            results.append(result)
        print(table(*results, args.pages))
        print(numbers_report(*results, args.pages))
        return 0

    scratch = Path(tempfile.mkdtemp(prefix="bench-pages-"))
    results, added = [], []
    try:
        for label, revision in (("base", args.base), ("head", args.head)):
            if revision == ".":
                folder, commit = ROOT, ""
            else:
                commit = git("rev-parse", "--verify", f"{revision}^{{commit}}")
                folder = scratch / label
                git("worktree", "add", "--detach", str(folder), commit)
                added.append(folder)
            results.append((Result(label, revision, commit), folder))
        for page in args.pages:  # page by page, base then head: both see about the same machine load
            for result, folder in results:
                run(result, folder, page, args.python, args.workers_1, scratch)
        (base, _), (head, _) = results
        print(table(base, head, args.pages))
        print(numbers_report(base, head, args.pages))
        if args.keep:
            args.keep.mkdir(parents=True, exist_ok=True)
            for result, _ in results:
                (args.keep / f"{result.label}.out").write_text(result.stdout)
                (args.keep / f"{result.label}.err").write_text(result.stderr)
        failed = [r.label for r, _ in results if r.exit_code]
        if failed:
            print(f"bench_pages: exit status not 0 at {', '.join(failed)} (a failed assert or an error; see --keep)",
                  file=sys.stderr)
        return 1 if failed else 0
    finally:
        for folder in added:
            subprocess.run(["git", "worktree", "remove", "--force", str(folder)], cwd=ROOT, capture_output=True)
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
