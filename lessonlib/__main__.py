"""The command-line door: ``python -m lessonlib run|notebook|check docs/PATH.md ...``."""
from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import nbformat

from lessonlib.engine.blocks import ParsedPage, parse_page
from lessonlib.engine.config import Settings, load_settings
from lessonlib.engine.errors import LessonError, SetupError
from lessonlib.engine.notebook import to_notebook
from lessonlib.engine.numerals import hand_typed_numerals
from lessonlib.engine.outputs import BlockOutput
from lessonlib.engine.page import PageResult, execute_pages


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
    check = commands.add_parser("check", help="list numerals typed by hand in the prose of pages (runs nothing)")
    check.add_argument("pages", type=Path, nargs="+")
    parser.add_argument("--config", type=Path, default=Path("mkdocs.yml"), help="default: %(default)s")
    args = parser.parse_args(argv)

    for page in args.pages:
        if not page.is_file():
            parser.error(f"no such page: {page}")
    if args.command == "check":
        return _check(args.pages)
    try:
        return _execute(parser, args)
    except SetupError as e:
        print(f"lessonlib: {e}", file=sys.stderr)
        return 2


def _execute(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    settings = load_settings(args.config) if args.config.is_file() else Settings().with_environment()
    settings = replace(settings, refresh=settings.refresh or getattr(args, "refresh", False),
                       keep_going=getattr(args, "keep_going", False))
    root = settings.root.resolve()
    for page in args.pages:
        if root not in page.resolve().parents:
            parser.error(f"{page} is not inside the project {root} (the folder of {args.config})")
    sources = [(page.read_text(encoding="utf-8"), page.resolve().relative_to(root).as_posix()) for page in args.pages]
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
    """Each numeral in prose as ``docs/PATH.md:LINE: ...``; exit status 1 if there is any."""
    found = 0
    for page in pages:
        for numeral in hand_typed_numerals(page.read_text(encoding="utf-8")):
            print(f"{page.as_posix()}:{numeral.line}: {numeral}")
            found += 1
    if found:
        print(f"{found} numerals typed by hand: make each an inline value (`{{py}} expr`), or mark a "
              "deliberate literal as `{lit} text`", file=sys.stderr)
    return 1 if found else 0


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
