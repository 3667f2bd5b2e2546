"""Authoring speed, measured side by side on the whole site in one run.

    .venv/bin/python scripts/bench_build.py [--lesson docs/lessons/X.md] [--skip-serve] [--repeats N]
                                            [--warm CACHE]

Builds, each into a scratch folder with a scratch cache:
  (a) cold: empty cache, pages on the default number of workers (one per core)
  (a1) cold with one worker (LESSONLIB_WORKERS=1: one process at a time, pages and their
       experiments): the gain from running in parallel, and a reproducibility check: its site
       must equal (a)'s byte for byte, apart from the dated sitemap, measured timings (blocks
       marked `timing`) and the search index built from them
  (a0) cold on one core (taskset): the gain from the second core, pages and their experiments together
  (b) warm: no change   (c) after a prose-only edit   (d) after editing one code block
  (e) floor: LESSONLIB_EXECUTE=0   (p) plain MkDocs, without the lessonlib plugin at all,
  (q) the same after the prose edit   (f) plain MkDocs with every exec fence a plain Python fence:
  the same code highlighted, no outputs   (fq) the same after the prose edit
  (r) plain MkDocs on the pages as rendered (outputs and figures in the Markdown): what the
  engine itself adds to a warm build, beyond the content it shows.
The quick rows (all but a, a1, a0 and d) run N times (default 3), interleaved, and each prints
its median: one run of a two-second build varies by a tenth of a second on a shared machine.
--warm CACHE starts from a copy of a cache an earlier build filled (e.g. ~/.cache/lessonlib) and
runs only the quick rows: minutes instead of three cold builds; with --warm-ratio, only b, p and
(s) warm with lessonlib's search memo off: what that memo saves.
then the per-page start-up cost of a worker process against running the same page in-process,
and `mkdocs serve`: seconds from a prose edit until the reloaded page shows it.
Every file it edits is restored, even when interrupted.
"""
from __future__ import annotations

import argparse
import filecmp
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
DATED = {"sitemap.xml", "sitemap.xml.gz"}  # MkDocs writes the build date into these
RAN = re.compile(r"lessonlib: (?:\[\d+/\d+\] )?(\S+): ran (\d+) blocks in ([\d.]+) s")


# mkdocs with lessonlib's search memo (lessonlib/engine/builder/search_memo.py) switched off
WITHOUT_SEARCH_MEMO = ("import sys; from lessonlib.engine.builder import plugin; "
                       "plugin.memoize_search = lambda *a: None; "
                       "from mkdocs.__main__ import cli; sys.argv[0] = 'mkdocs'; cli()")


def build(cache: Path, out: Path, execute: bool = True, config: Path = ROOT / "mkdocs.yml", strict: bool = True,
          prefix: tuple[str, ...] = (), search_memo: bool = True, **variables: str) -> tuple[float, int, list[str]]:
    """Seconds, blocks executed, and the pages that ran."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "LESSONLIB_CACHE_DIR": str(cache), **variables}
    env["LESSONLIB_EXECUTE"] = "1" if execute else "0"
    started = time.perf_counter()
    result = subprocess.run(
        [*prefix, sys.executable, *(["-m", "mkdocs"] if search_memo else ["-c", WITHOUT_SEARCH_MEMO]), "build",
         *(["--strict"] if strict else []),
         "-f", str(config), "-d", str(out)],
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
    """Files that differ, once measured timings are taken out (see `comparable`; a measured
    figure is its own file, named by its content)."""
    def walk(cmp: filecmp.dircmp, prefix: str):
        yield from (prefix + n for n in cmp.left_only + cmp.right_only if not n.startswith("timing-figure-"))
        _, mismatch, errors = filecmp.cmpfiles(cmp.left, cmp.right, cmp.common_files, shallow=False)
        yield from (prefix + n for n in mismatch + errors
                    if comparable(Path(cmp.left, n)) != comparable(Path(cmp.right, n)))
        for name, sub in cmp.subdirs.items():
            yield from walk(sub, f"{prefix}{name}/")

    return set(walk(filecmp.dircmp(a, b), ""))


_TIMING_HTML = re.compile(r'<(figure|div) class="[^"]*lessonlib-timing.*?</\1>', re.S)


def comparable(path: Path) -> str | None:
    """A file's content without its measured timings: the output of blocks marked `timing`
    (in pages and notebooks). None for files that only repeat those (the search index)."""
    if path.name == "search_index.json" or not path.is_file():
        return None
    text = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix == ".html":
        return _TIMING_HTML.sub("", text)
    if path.suffix == ".ipynb":
        notebook = json.loads(text)
        for cell in notebook["cells"]:
            if "timing" in cell.get("metadata", {}).get("tags", []):
                cell["outputs"] = []
        return json.dumps(notebook)
    return text


def without_lessonlib(scratch: Path, docs: Path = ROOT / "docs", name: str = "mkdocs-plain.yml") -> Path:
    """mkdocs.yml without the lessonlib plugin, for the pages in `docs`: plain MkDocs."""
    loader = type("Loader", (yaml.SafeLoader,), {})
    loader.add_constructor("!ENV", lambda load, node: load.construct_sequence(node)[-1])  # its default
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=loader)  # noqa: S506 (a safe loader)
    ours = lambda p: p == "lessonlib" or (isinstance(p, dict) and "lessonlib" in p)  # noqa: E731
    config["plugins"] = [p for p in config["plugins"] if not ours(p)]
    config["docs_dir"] = str(docs)
    # Built without --strict: to plain Markdown an exec fence whose caption holds {braces} is no
    # fence, so the headings after it (and their anchors) vanish into code. A timing baseline only.
    config["strict"] = False
    plain = scratch / name
    plain.write_text(yaml.safe_dump(config))
    return plain


def docs_as_plain_code(scratch: Path) -> Path:
    """A copy of docs/ in which every exec fence is a plain Python fence: the lessons as plain
    MkDocs would show them if it could read them (highlighted code, no outputs). To plain MkDocs
    `python exec ...` is no valid fence, so (p) shows that code unhighlighted or swallows the
    prose after it into one code block: a baseline that skips most of the highlighting."""
    docs = scratch / "plain-code-docs"
    shutil.rmtree(docs, ignore_errors=True)
    shutil.copytree(ROOT / "docs", docs)
    for page in docs.rglob("*.md"):
        text = page.read_text(encoding="utf-8")
        plain = re.sub(r"^( *)(`{3,}|~{3,})python exec\b.*$", r"\1\2python", text, flags=re.M)
        page.write_text(plain, encoding="utf-8")
    return docs


def rendered_docs(scratch: Path, cache: Path) -> Path:
    """A copy of docs/ whose executable pages hold what the engine renders them to (from the
    cache): Markdown with the outputs, figures and inline values in place."""
    from lessonlib.engine.builder.page import PageResult, execute_pages
    from lessonlib.engine.builder.render import figure_files
    from lessonlib.engine.config import Settings

    docs = scratch / "rendered-docs"
    shutil.copytree(ROOT / "docs", docs)
    pages = sorted((ROOT / "docs").rglob("*.md"))
    sources = [(p.read_text(encoding="utf-8"), p.relative_to(ROOT).as_posix()) for p in pages]
    for page, result in zip(pages, execute_pages(sources, Settings(root=ROOT, cache_dir=cache))):
        if not isinstance(result, PageResult) or (result.outputs is not None and not result.from_cache):
            sys.exit(f"{page}: not rendered from the cache")
        rendered = docs / page.relative_to(ROOT / "docs")
        rendered.write_text(result.markdown, encoding="utf-8")
        folder = rendered.parent if rendered.stem == "index" else rendered.with_suffix("")  # the page's URL
        for name, svg in figure_files(result.page, result.outputs.blocks).items() if result.outputs else ():
            folder.mkdir(exist_ok=True)
            (folder / name).write_text(svg, encoding="utf-8")
    return docs


def page_startup_seconds(scratch: Path, pages: int = 8) -> tuple[float, float]:
    """Per page: a trivial page in a fresh worker process (the template started once) and the
    same page run in this process, as before Engine 2."""
    from lessonlib.engine.builder.page import execute_pages
    from lessonlib.engine.config import Settings
    from lessonlib.engine.worker.blocks import parse_page
    from lessonlib.engine.worker.session import Session

    (scratch / "docs").mkdir(parents=True, exist_ok=True)
    text = "```python exec\nimport torch\nx = torch.ones(3).sum().item()\n```\n\nx = `{py} x`\n"
    settings = Settings(root=scratch, workers=1)
    execute_pages([(text, "docs/warmup.md")], settings)  # starts the template once
    started = time.perf_counter()
    execute_pages([(text, f"docs/p{i}.md") for i in range(pages)], settings)
    in_worker = (time.perf_counter() - started) / pages
    started = time.perf_counter()
    for i in range(pages):
        page = parse_page(text, f"docs/p{i}.md")
        session = Session(page)
        [session.run(b) for b in page.blocks], [session.value(v) for v in page.inlines]
    return in_worker, (time.perf_counter() - started) / pages


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
    parser.add_argument("--lesson", type=Path, default=ROOT / "docs/lessons/recurrent-networks.md")
    parser.add_argument("--skip-serve", action="store_true")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each quick (warm) row; its median is printed")
    parser.add_argument("--serve-only", action="store_true", help="only the floor and the serve reload")
    parser.add_argument("--warm", type=Path, metavar="CACHE", help="start from a copy of CACHE; only the quick rows")
    parser.add_argument("--warm-ratio", action="store_true",
                        help="with --warm: only rows b and p, one after the other in each repeat, and the median "
                             "of the repeats' b/p ratios (each pair ran seconds apart, under the same load)")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    if args.warm_ratio and not args.warm:
        parser.error("--warm-ratio needs --warm CACHE (it measures warm builds only)")
    lesson = args.lesson.resolve()
    scratch = Path(tempfile.mkdtemp(prefix="bench-build-"))
    cache = scratch / "cache"
    try:
        if args.serve_only:
            floor = build(cache, scratch / "floor", execute=False)[0]
            build(cache, scratch / "cold")
            reload = serve_reload_seconds(cache, lesson)
            print(f"mkdocs serve, prose edit -> page ready: {reload:.2f} s; floor {floor:.2f} s; "
                  f"ratio {reload / floor:.2f}")
            return
        plain = without_lessonlib(scratch)
        rows: dict[str, list[tuple[float, int, list[str]]]] = {}  # each row's runs

        def run(name: str, *args, **kwargs) -> None:
            rows.setdefault(name, []).append(build(*args, **kwargs))

        if args.warm:
            shutil.copytree(args.warm, cache)
            build(cache, scratch / "warm")  # unmeasured: whatever the copy lacks
        else:
            run("a cold", cache, scratch / "cold")
            run("a1 cold, 1 worker", scratch / "cache1", scratch / "cold1", LESSONLIB_WORKERS="1")
            run("a0 cold, one core", scratch / "cache0", scratch / "cold0", prefix=("taskset", "-c", "0"))
        if args.warm and args.warm_ratio:
            for _ in range(args.repeats):
                run("b warm, no change", cache, scratch / "warm")
                run("p plain MkDocs", cache, scratch / "plain", config=plain, strict=False)
                run("s warm, no search memo", cache, scratch / "warm-s", search_memo=False)
            pairs = [b[0] / p[0] for b, p in zip(rows["b warm, no change"], rows["p plain MkDocs"])]
            for name, runs in rows.items():
                print(f"{name:<28}{statistics.median(s for s, _, _ in runs):>9.2f}  "
                      + ", ".join(f"{s:.2f}" for s, _, _ in runs))
            print(f"median of the paired ratios b/p = {statistics.median(pairs):.3f}   (goal <= 1.05); "
                  f"each: {', '.join(f'{r:.2f}' for r in pairs)}")
            saved = [1 - b[0] / s[0] for b, s in zip(rows["b warm, no change"], rows["s warm, no search memo"])]
            print(f"the search memo saves {statistics.median(saved):.1%} of a warm build (median of the pairs; "
                  f"kept if over 5%); each: {', '.join(f'{r:.1%}' for r in saved)}")
            return
        rendered = without_lessonlib(scratch, rendered_docs(scratch, cache), "mkdocs-rendered.yml")
        # The quick rows, interleaved, args.repeats times: each prints its median.
        for _ in range(args.repeats):
            with edited(lesson, prose_edit):
                run("c prose edit", cache, scratch / "prose")
                run("q plain, prose edit", cache, scratch / "plain-prose", config=plain, strict=False)
                as_code = without_lessonlib(scratch, docs_as_plain_code(scratch), "mkdocs-code.yml")
                run("fq plain code, prose edit", cache, scratch / "plain-code-prose", config=as_code, strict=False)
            build(cache, scratch / "warm")  # unmeasured: the notebook store back to the unedited page
            run("b warm, no change", cache, scratch / "warm")
            run("p plain MkDocs", cache, scratch / "plain", config=plain, strict=False)
            docs_as_plain_code(scratch)  # again, without the edit
            run("f plain, exec as code", cache, scratch / "plain-code", config=as_code, strict=False)
            run("r plain, rendered pages", cache, scratch / "rendered", config=rendered, strict=False)
            run("e floor (EXECUTE=0)", cache, scratch / "floor", execute=False)
        if not args.warm:
            with edited(lesson, code_edit):
                run("d code edit", cache, scratch / "code")

        print(f"\nWhole site, lesson edited: {lesson.relative_to(ROOT)}")
        print(f"{'build':<28}{'seconds':>9}{'blocks run':>12}  pages run (or each run's seconds)")
        seconds = {name: statistics.median(s for s, _, _ in runs) for name, runs in sorted(rows.items())}
        for name, runs in sorted(rows.items()):
            _, blocks, pages = runs[-1]
            each = ", ".join(f"{s:.2f}" for s, _, _ in runs) if len(runs) > 1 else ", ".join(pages)
            print(f"{name:<28}{seconds[name]:>9.2f}{blocks:>12}  {each or '-'}")
        if not args.warm:
            print(f"ratio a/a1 (default workers / 1 worker) = {seconds['a cold'] / seconds['a1 cold, 1 worker']:.2f}"
                  "   (goal <= 0.65)")
            print(f"ratio a/a0 (all cores / one core) = {seconds['a cold'] / seconds['a0 cold, one core']:.2f}")
            # a0 is the build's CPU time: no build on N cores ends before a0 / N.
            print(f"least a/a1 possible on {os.cpu_count()} cores: (a0 / {os.cpu_count()}) / a1 = "
                  f"{seconds['a0 cold, one core'] / os.cpu_count() / seconds['a1 cold, 1 worker']:.2f}")
        print(f"ratio b/p (warm / plain MkDocs) = {seconds['b warm, no change'] / seconds['p plain MkDocs']:.2f}"
              "   (goal <= 1.05)")
        print(f"ratio c/q (prose edit / plain MkDocs, same edit) = "
              f"{seconds['c prose edit'] / seconds['q plain, prose edit']:.2f}   (goal <= 1.2)")
        print(f"ratio b/f (warm / plain MkDocs, exec fences as code) = "
              f"{seconds['b warm, no change'] / seconds['f plain, exec as code']:.2f}")
        print(f"ratio c/fq (prose edit / the same, same edit) = "
              f"{seconds['c prose edit'] / seconds['fq plain code, prose edit']:.2f}")
        print(f"ratio b/r (warm / plain MkDocs on the rendered pages) = "
              f"{seconds['b warm, no change'] / seconds['r plain, rendered pages']:.2f}")
        floor = seconds["e floor (EXECUTE=0)"]
        for name in ("b warm, no change", "c prose edit", "d code edit"):
            if name in seconds:
                print(f"ratio {name[0]}/e = {seconds[name] / floor:.2f}")

        if not args.warm:
            differing = differing_files(scratch / "cold", scratch / "cold1")
            print(f"\n1 worker vs default: files differing once timings are set aside: "
                  f"{sorted(differing) or 'none'} (allowed: dated {sorted(DATED)})")
            print("same bytes:", "yes" if differing <= DATED else f"NO: {sorted(differing - DATED)}")

        in_worker, in_process = page_startup_seconds(scratch / "startup")
        print(f"\nper page, a trivial page: {1e3 * in_worker:.0f} ms in its own worker process, "
              f"{1e3 * in_process:.1f} ms in-process; start-up overhead {1e3 * (in_worker - in_process):.0f} ms")

        if not args.skip_serve:
            reload = serve_reload_seconds(cache, lesson)
            print(f"\nmkdocs serve, prose edit -> page ready: {reload:.2f} s; ratio to floor = {reload / floor:.2f}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
