"""The command-line door: ``python -m lessonlib run|notebook|check docs/PATH.md``."""
from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import nbformat

from lessonlib.engine.errors import LessonError
from lessonlib.engine.notebook import to_notebook
from lessonlib.engine.numerals import hand_typed_numerals
from lessonlib.engine.page import PageResult, Settings, execute_page
from lessonlib.engine.plugin import load_settings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lessonlib", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run one page; print each block's output and every inline value")
    run.add_argument("page", type=Path)
    run.add_argument("--refresh", action="store_true", help="ignore the cache (results are still stored)")
    export = commands.add_parser("notebook", help="export one page as a Jupyter notebook (runs it first)")
    export.add_argument("page", type=Path)
    export.add_argument("-o", "--output", type=Path, required=True)
    check = commands.add_parser("check", help="list numerals typed by hand in the prose of pages (runs nothing)")
    check.add_argument("pages", type=Path, nargs="+")
    parser.add_argument("--config", type=Path, default=Path("mkdocs.yml"), help="default: %(default)s")
    args = parser.parse_args(argv)

    if args.command == "check":
        return _check(parser, args.pages)
    if not args.page.is_file():
        parser.error(f"no such page: {args.page}")
    settings = load_settings(args.config) if args.config.is_file() else Settings().with_environment()
    settings = replace(settings, refresh=settings.refresh or getattr(args, "refresh", False))
    try:
        result = execute_page(args.page.read_text(encoding="utf-8"), args.page.as_posix(), settings)
    except LessonError as e:
        print(e, file=sys.stderr)
        return 1
    if args.command == "notebook":
        nbformat.write(to_notebook(result.page, result.outputs), args.output)
        print(f"wrote {args.output}")
    else:
        _print_outputs(result)
    return 0


def _check(parser: argparse.ArgumentParser, pages: list[Path]) -> int:
    """Each numeral in prose as ``docs/PATH.md:LINE: ...``; exit status 1 if there is any."""
    found = 0
    for page in pages:
        if not page.is_file():
            parser.error(f"no such page: {page}")
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
    blocks, values = result.outputs
    for block, output in zip(result.page.blocks, blocks):
        print(f"--- {result.page.path}:{block.start + 1} ({block.kind})")
        if output.text:
            print(output.text.rstrip())
        for figure in output.figures:
            print(f"[figure: {figure.alt}]")
    for inline in result.page.inlines:
        print(f"--- {result.page.path}:{inline.line} `{{py}} {inline.source}` = {values[inline.source]}")
    how = "from cache" if result.from_cache else f"ran {result.blocks_run} blocks"
    print(f"{result.page.path}: {how} in {result.seconds:.2f} s", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
