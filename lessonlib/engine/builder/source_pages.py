"""The code behind the lessons, on the site: one page per module of the packages named in
mkdocs.yml's `source_pages`, with the module's functions and classes (each with the first line
of its docstring, linked to its lines) above its whole source, highlighted by Pygments with every
line an anchor (`#L-40`; pymdownx.highlight would put anchors in every lesson's code too). A source
block's file label in a lesson ("lessonlib/experiments/cost.py, line 40") links to those lines
(`link_labels`), and so does each memoized call a block names.

Made from the files alone, nothing imported: it works offline, without a repository address,
and for a package whose modules need torch on a site built without it. With a repository
address (mkdocs.yml's repo_url), each page also links its file there.
"""
from __future__ import annotations

import ast
import html
import importlib.util
import posixpath
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import PythonLexer

FOLDER = "code"  # the pages' folder in the site
LINE_ANCHOR = "L-{line}"  # Pygments' anchor of a line (lineanchors="L")
_LABEL = re.compile(r'<span class="filename">([\w./-]+\.py), line (\d+)</span>')


@dataclass(frozen=True)
class SourcePage:
    module: str  # lessonlib.experiments.cost
    file: str  # lessonlib/experiments/cost.py: how source labels and memo names name it
    src_uri: str  # code/lessonlib/experiments/cost.md
    summary: str  # the first paragraph of its docstring, on one line
    markdown: str


def module_files(package: str) -> list[tuple[str, Path]]:
    """(dotted name, file) of `package` and every module under it, found without importing it."""
    top, *rest = package.split(".")
    spec = importlib.util.find_spec(top)
    if spec is None:
        raise LookupError(f"source_pages names {package}, which is not installed")
    base = Path(spec.origin).parent if spec.submodule_search_locations else Path(spec.origin).with_suffix("")
    path = base.joinpath(*rest)
    if path.with_suffix(".py").is_file():
        return [(package, path.with_suffix(".py"))]
    if not path.is_dir():
        raise LookupError(f"source_pages names {package}, which has no module file")
    found = []
    for file in sorted(path.rglob("*.py")):
        parts = file.relative_to(path).with_suffix("").parts
        if "__pycache__" not in parts:
            name = ".".join([package, *parts]).removesuffix(".__init__")
            found.append((name, file))
    return found


def source_page(module: str, file: Path, repo_url: str = "", branch: str = "main",
                remember: Callable[[str, Callable[[], str]], str] = lambda text, render: render()) -> SourcePage:
    """The module's page; `remember(text, render)` may keep the highlighted HTML between builds."""
    text = file.read_text(encoding="utf-8")
    shown = module.replace(".", "/") + ("/__init__.py" if file.name == "__init__.py" else ".py")
    lines = [f"# `{module}`", ""]
    where = f"The file `{shown}`, {len(text.splitlines()):,} lines"
    if repo_url:
        where += f" ([in the repository]({repo_url.rstrip('/')}/blob/{branch}/{shown}))"
    lines += [where + ".", ""]
    tree = ast.parse(text)
    rows = _definitions(tree)
    if rows:
        lines += ["<table><thead><tr><th>Defines</th><th>Line</th><th>What it is</th></tr></thead><tbody>"]
        lines += [f'<tr><td><a href="#{LINE_ANCHOR.format(line=line)}">{html.escape(name)}</a> '
                  f"({kind})</td><td>{line}</td><td>{html.escape(summary)}</td></tr>"
                  for name, kind, line, summary in rows]
        lines += ["</tbody></table>", ""]
    # Search keeps the names and summaries above, not every line: the index is built in each
    # reader's browser on every page load, and the listings were most of it. Not a <div>: Material's
    # search lifts an exclusion when any <div> inside it closes, as the line numbers' does.
    lines += ["<section data-search-exclude>" + remember(text, lambda: highlighted(text)) + "</section>", ""]
    return SourcePage(module, shown, f"{FOLDER}/{shown[:-3]}.md", _first_paragraph(tree), "\n".join(lines))


def index_page(pages: list[SourcePage]) -> str:
    """The pages' index: every module, with the first line of its docstring."""
    lines = ["# The code", "", "Every module behind the lessons, as the site was built from it. Search finds a module "
             "by the names it defines and what each is, not by every line of its code.", ""]
    for page in pages:
        lines.append(f"- [{page.module}]({posixpath.relpath(page.src_uri, FOLDER)}): {html.escape(page.summary)}")
    return "\n".join(lines) + "\n"


def highlighted(text: str) -> str:
    """Python source as Material shows code (the same classes as pymdownx.highlight's), with
    numbered lines, each number a link to its line."""
    formatter = HtmlFormatter(linenos="table", lineanchors="L", anchorlinenos=True, wrapcode=True,
                              cssclass="highlight")
    return highlight(text, PythonLexer(), formatter)


def _definitions(tree: ast.Module) -> list[tuple[str, str, int, str]]:
    """The module's top-level functions and classes, and its classes' methods: (name, kind,
    first line, decorators included, and the first line of the docstring)."""
    found = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.append(_row(node.name, node))
            if isinstance(node, ast.ClassDef):
                found += [_row(f"{node.name}.{m.name}", m) for m in node.body
                          if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))]
    return found


def _row(name: str, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> tuple[str, str, int, str]:
    kind = "class" if isinstance(node, ast.ClassDef) else "function"
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    return name, kind, first, _first_paragraph(node)


def _first_paragraph(node: ast.AST) -> str:
    return " ".join((ast.get_docstring(node) or "").split("\n\n")[0].split())


def link_names(page_html: str, hrefs: dict[str, str]) -> str:
    """Each name in the page's highlighted code that `hrefs` has (a memoized function's) as a
    link to its lines."""
    if not hrefs:
        return page_html
    names = "|".join(map(re.escape, sorted(hrefs)))
    return re.sub(rf'<span class="n">({names})</span>',
                  lambda m: f'<a class="lessonlib-code-link" href="{html.escape(hrefs[m.group(1)])}">'
                            f'<span class="n">{m.group(1)}</span></a>', page_html)


def link_labels(page_html: str, href: Callable[[str, int], str | None]) -> str:
    """Each source block's label ("lessonlib/x.py, line 40") as a link to those lines, where
    `href(file, line)` knows the file's page (None: the label stays text)."""
    def link(label: re.Match[str]) -> str:
        target = href(label.group(1), int(label.group(2)))
        if target is None:
            return label.group(0)
        text = f"{label.group(1)}, line {label.group(2)}"
        return f'<span class="filename"><a href="{html.escape(target)}">{text}</a></span>'

    return _LABEL.sub(link, page_html)
