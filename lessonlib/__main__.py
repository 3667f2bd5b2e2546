"""The command-line door: ``python -m lessonlib run|notebook|check docs/PATH.md ...``, and
``python -m lessonlib cache [--clear]``."""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import nbformat

from lessonlib.engine.builder.claims import binding
from lessonlib.engine.builder.notebook import to_notebook
from lessonlib.engine.builder.numerals import hand_typed_numerals, hidden_values
from lessonlib.engine.builder.page import PageResult, execute_pages
from lessonlib.engine.config import Settings, load_settings
from lessonlib.engine.worker.blocks import ParsedPage, parse_page, read_page
from lessonlib.engine.worker.errors import LessonError, SetupError
from lessonlib.engine.worker.outputs import BlockOutput


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lessonlib", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run pages (in parallel); print each block's output and every inline value")
    run.add_argument("pages", type=Path, nargs="+")
    run.add_argument("--refresh", action="store_true", help="ignore the cache (results are still stored)")
    run.add_argument("--keep-going", action="store_true",
                     help="run each page on past a failed assert, and list every assert that failed")
    export = commands.add_parser("notebook", help="export one page as a Jupyter notebook (runs it first)")
    export.add_argument("pages", type=Path, nargs=1, metavar="page")
    export.add_argument("-o", "--output", type=Path, required=True)
    check = commands.add_parser("check", help="list numerals typed by hand and claims no check quotes (runs nothing)")
    check.add_argument("pages", type=Path, nargs="+")
    cache = commands.add_parser("cache", help="say where the cache is and how much it holds (runs nothing)")
    cache.add_argument("--clear", action="store_true", help="empty it (every page and experiment runs again)")
    parser.add_argument("--config", type=Path, default=Path("mkdocs.yml"), help="default: %(default)s")
    args = parser.parse_args(argv)

    for page in getattr(args, "pages", []):
        if not page.is_file():
            parser.error(f"no such page: {page}")
    refused = _refused_output(args.output, args.config.resolve().parent) if args.command == "notebook" else None
    if refused:
        print(f"lessonlib: {refused}", file=sys.stderr)
        return 2
    try:
        if args.command == "check":
            return _check(args.pages)
        return _cache(args) if args.command == "cache" else _execute(parser, args)
    except SetupError as e:
        print(f"lessonlib: {e}", file=sys.stderr)
        return 2
    except LessonError as e:  # a page that cannot be read as a page
        print(e, file=sys.stderr)
        return 1


def _refused_output(output: Path, root: Path) -> str | None:
    """Why the notebook may not be written to `output`, or None: it must be a new or exported
    .ipynb in an existing folder, and not an author's file (under docs/, or tracked by git)."""
    target = output.resolve()
    if target.is_dir():
        return f"-o {output} is a folder: name the notebook file, e.g. {output / 'page.ipynb'}"
    if not target.parent.is_dir():
        return f"-o {output}: the folder {output.parent} does not exist"
    if target.suffix != ".ipynb":
        return f"-o {output}: a notebook's name ends in .ipynb"
    if target.is_relative_to(root / "docs"):
        return f"-o {output} is under the docs folder, where the site's pages and files are: write it elsewhere"
    if shutil.which("git") is None:  # no git, no tracked file
        return None
    tracked = subprocess.run(["git", "ls-files", "--error-unmatch", str(target)], cwd=target.parent,
                             capture_output=True, check=False)
    if tracked.returncode == 0:
        return f"-o {output} is a file git tracks: write the notebook elsewhere"
    return None


def _settings(args: argparse.Namespace) -> Settings:
    return load_settings(args.config) if args.config.is_file() else Settings().with_build_environment()


def _cache(args: argparse.Namespace) -> int:
    settings = _settings(args)
    folder = settings.cache_dir
    if folder is None:
        print("no cache: set LESSONLIB_CACHE_DIR, or run in the folder of mkdocs.yml")
        return 0
    files = [p for p in folder.rglob("*") if p.is_file()] if folder.is_dir() else []
    size = f"{sum(p.stat().st_size for p in files) / 2**20:.1f} MB in {len(files)} files"
    if args.clear:
        shutil.rmtree(folder, ignore_errors=True)
        print(f"cleared the cache at {folder} ({size})")
    else:
        print(f"the cache at {folder} holds {size} (limit {settings.cache_limit_mb:g} MB)")
    return 0


def _execute(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    settings = _settings(args)
    settings = replace(settings, refresh=settings.refresh or getattr(args, "refresh", False),
                       keep_going=getattr(args, "keep_going", False))
    root = settings.root.resolve()
    for page in args.pages:
        if root not in page.resolve().parents:
            parser.error(f"{page} is not inside the project {root} (the folder of {args.config})")
    names = [page.resolve().relative_to(root).as_posix() for page in args.pages]
    sources = [(read_page(page, name), name) for page, name in zip(args.pages, names, strict=True)]
    results = execute_pages(sources, settings, report=lambda line: print(line, file=sys.stderr))
    errors = [r for r in results if isinstance(r, LessonError)]
    texts = {path: text for text, path in sources}
    for error in errors:  # what the blocks before the failure printed, then the failure
        if error.outputs_before:
            _print_blocks(parse_page(texts[error.path], error.path), error.outputs_before)
        print(error, file=sys.stderr)
    if args.command == "notebook" and not errors:
        nbformat.write(to_notebook(results[0].page, results[0].outputs), args.output)
        print(f"wrote {args.output}")
    elif args.command == "run":  # the pages that passed, even when another failed
        for result in results:
            if not isinstance(result, LessonError):
                _print_outputs(result)
    return 1 if errors else 0


def _check(pages: list[Path]) -> int:
    """Each numeral in prose, each value a hidden block computed, each quoted phrase no longer in
    the prose and each claim-like sentence no check quotes, as ``docs/PATH.md:LINE: ...``; exit
    status 1 if there is any."""
    numerals = claims_unchecked = 0
    for page in pages:
        name = page.as_posix()
        text = read_page(page, name)
        for numeral in sorted([*hand_typed_numerals(text), *hidden_values(text, name)], key=lambda n: n.line):
            print(f"{name}:{numeral.line}: {numeral}")
            numerals += 1
        found = binding(parse_page(text, name), text)
        for line, problem in found.problems():
            print(f"{name}:{line}: {problem}")
            claims_unchecked += 1
        print(f"{name}: {found.counts()}", file=sys.stderr)
    if numerals:
        print(f"{numerals} numbers typed by hand or computed in hidden blocks: make each an inline value "
              "(`{py} expr`) over code the reader can see, or mark a deliberate literal as `{lit} text`",
              file=sys.stderr)
    if claims_unchecked:
        print(f"{claims_unchecked} claims not bound to a check: quote each sentence, or a phrase of it, in the "
              'assert that checks it (assert ..., claim("phrase")), or follow it with <!-- not a claim -->',
              file=sys.stderr)
    return 1 if numerals or claims_unchecked else 0


def _print_outputs(result: PageResult) -> None:
    if result.outputs is None:
        print(f"{result.page.path}: nothing to run")
        return
    blocks, values = result.outputs.blocks, result.outputs.values
    _print_blocks(result.page, blocks)
    for inline in result.page.inlines:
        print(f"--- {result.page.path}:{inline.line} `{{py}} {inline.source}` = {values[inline.source]}")
    print(result.summary, file=sys.stderr)


def _print_blocks(page: ParsedPage, outputs: list[BlockOutput]) -> None:
    for block, output in zip(page.blocks, outputs):
        print(f"--- {page.path}:{block.start + 1} ({block.kind})")
        if output.text:
            print(output.text.rstrip())
        for figure in output.figures:
            print(f"[figure: {figure.alt}]")


if __name__ == "__main__":
    sys.exit(main())
