"""Export a lesson page as a Jupyter notebook that reproduces it.

Prose becomes Markdown cells (inline values filled in as plain text), each ``python exec``
block a code cell with the page's output attached, and each ``>>>`` example of a ``pycon``
block a cell of its own, with its expected output. A first cell starts the kernel where every
page starts (seed 0 everywhere, the house figure style). Cells carry tags: ``timing`` for
measured timings, ``check`` for the asserts that back the prose (their source folded),
``pycon`` for examples, ``setup`` for the first one. What a page hides (hide-code, hide-output)
a cell folds.

A cell runs what its block ran, in a ``__main__`` as the page's blocks do. Jupyter reads a cell
as IPython input, not as Python: what IPython would strip from a line (a prompt, a blank line's
indent, in a string too) is written so that it reads the same (_as_typed).

A published notebook (a lesson's, or an exercise, published_exercise) starts with one more
cell, tagged ``install``: it installs lessonlib from the wheel the site publishes, with the
pinned versions of what it needs (lessonlib.engine.builder.wheel), so that it runs in any fresh Python
environment, away from this repository.
"""
from __future__ import annotations

import ast
import hashlib
import io
import ipaddress
import json
import pickle
import re
import tokenize
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath
from urllib.parse import urljoin, urlsplit

from nbformat import NotebookNode, from_dict, v4

from lessonlib.engine.builder.cache import path_name
from lessonlib.engine.builder.render import (
    DATA_TITLE,
    markdown_table,
    render_line,
    source_markdown,
)
from lessonlib.engine.builder.wheel import CONSTRAINTS
from lessonlib.engine.worker.blocks import SOURCE, Block, ParsedPage
from lessonlib.engine.worker.outputs import BlockOutput, PageOutputs
from lessonlib.engine.worker.store import cache_errors, kept, source_fingerprint

OWN_CODE = ("builder/notebook", "builder/render", "worker/blocks")  # the engine modules a notebook's text comes from
HIDDEN = {"hide-code": "source_hidden", "hide-output": "outputs_hidden"}  # what a cell folds, by block option
SETUP = """\
# Start where every page of the site starts: one torch thread, seed 0 in random, NumPy and torch,
# and the house figure style.
import lessonlib

lessonlib.start_page()"""

INSTALL = """\
# Install what this notebook needs, at the versions the course site was built with: lessonlib
# from the site, with the packages it uses (torch, NumPy, matplotlib, ...) pinned by the site's
# constraints.txt. Quick when they are installed already.
import importlib
import subprocess
import sys
import urllib.request

DOWNLOADS = "{downloads}"


class SetupFailed(Exception):
    def _render_traceback_(self):  # Jupyter shows the message alone, not a traceback
        return [str(self)]


try:
    urllib.request.urlopen(DOWNLOADS + "{constraints}", timeout=30).close()
except OSError as e:
    raise SetupFailed(f"Cannot reach the course site at {{DOWNLOADS}} ({{e}}): open this notebook "
                      "from the site it came from, while that site is served.") from None
pip = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--constraint", DOWNLOADS + "{constraints}",
                      {package}], capture_output=True, text=True)
if pip.returncode != 0:
    errors = [line for line in pip.stderr.splitlines() if line.startswith("ERROR")] or pip.stderr.splitlines()[-1:]
    raise SetupFailed(f"pip could not install lessonlib: {{' '.join(errors)}}")
importlib.invalidate_caches()  # the kernel finds the packages just installed"""


@dataclass(frozen=True)
class Install:
    """Where a published notebook installs lessonlib from."""
    downloads: str  # the URL of the site's downloads/ folder, ending in "/"
    wheel: str  # the wheel's file name there
    docs: str = "docs"  # the docs folder, relative to the project: its pages' links are made absolute
    extras: tuple[str, ...] = ()  # the project's extras installed with it (publish_extras: the course's torch ...)

    @property
    def site(self) -> str:
        return urljoin(self.downloads, "../")


def install_cell(install: Install) -> NotebookNode:
    """The first cell of a published notebook."""
    package = f'DOWNLOADS + "{install.wheel}"'
    if install.extras:  # pip takes extras on a wheel's URL only as a requirement: NAME[EXTRAS] @ URL
        package = f'"{install.wheel.partition("-")[0]}[{",".join(install.extras)}] @ " + {package}'
    return _code(INSTALL.format(downloads=install.downloads, package=package, constraints=CONSTRAINTS), "install")


def published_exercise(text: str, install: Install, src_uri: str) -> str:
    """An exercise notebook (at `src_uri` in the docs folder) as the site offers it: as written,
    after the install cell, its links leading to the site's pages."""
    notebook = v4.reads(text)
    for cell in notebook.cells:
        if cell.cell_type == "markdown":
            cell.source = site_links(cell.source, src_uri, install.site)
    cell = install_cell(install)
    cell.id = "install"
    notebook.cells.insert(0, cell)
    return v4.writes(notebook)


_LINK = re.compile(r"(?<!\\)\]\(([^()\s]+)\)")  # [text](target) and ![alt](target), not a value's \](text)


def site_links(markdown: str, src_uri: str, site: str) -> str:
    """Relative links of the page at `src_uri` (in the docs folder) as the site's absolute URLs,
    so that a notebook read away from the site still reaches the pages it names: `x.md#a` from
    the page's folder (as MkDocs resolves it, to x/#a), any other relative link from the page's URL."""
    source = PurePosixPath(src_uri)
    page = source.parent if source.stem == "index" else source.with_suffix("")
    page_url = urljoin(site, f"{page.as_posix()}/") if page.as_posix() != "." else site
    folder_url = urljoin(site, f"{source.parent.as_posix()}/") if source.parent.as_posix() != "." else site

    def absolute(link: re.Match[str]) -> str:
        target = link.group(1)
        if urlsplit(target).scheme:
            return link.group(0)
        path, hash_, anchor = target.partition("#")
        if path.endswith(".md"):
            name = PurePosixPath(path)
            path = (name.parent if name.stem == "index" else name.with_suffix("")).as_posix() + "/"
            return f"]({urljoin(folder_url, path.removeprefix('./'))}{hash_}{anchor})"
        return f"]({urljoin(page_url, target)})"

    return _LINK.sub(absolute, markdown)


def colab_url(site_url: str, repo_url: str, branch: str, path: str) -> str | None:
    """Where Colab opens the notebook at `path` in the site, or None. Colab opens notebooks from
    GitHub, not from any address: a site that `mkdocs gh-deploy` published has them on the
    repository's `branch` (mkdocs.yml's remote_branch). None for a site on this machine or a
    private network, which is no published site, or a repository not on GitHub."""
    host = urlsplit(site_url).hostname or ""
    repo = urlsplit(repo_url)
    if host == "localhost" or host.endswith(".localhost") or repo.hostname != "github.com":
        return None
    try:
        if not ipaddress.ip_address(host).is_global:
            return None
    except ValueError:
        pass  # a name, not an address
    return f"https://colab.research.google.com/github{repo.path.rstrip('/').removesuffix('.git')}/blob/{branch}/{path}"


def notebook_text(page: ParsedPage, outputs: PageOutputs, key: str, store: Path | None,
                  install: Install | None = None) -> str:
    """The page's notebook as written to disk, with `install`'s cell first. Building it is most
    of a warm build's own work, so with a `store` folder the text written last time for this
    page is reused while its cache key (code, versions), the code that exports it, its text and
    its outputs are the same. One file per page, replaced when anything changes. Not validated
    here (v4.writes, not nbformat.writes): the schema alone took longer to load than the notebook
    to build, and nbformat.writes only logs what it finds; the tests validate every exported
    notebook."""
    if store is None:
        return v4.writes(to_notebook(page, outputs, install))
    facts = [key, source_fingerprint(*OWN_CODE), "".join(page.lines), asdict(install) if install else None]
    # The outputs (megabytes of SVG) pickled, not turned into JSON: ten times quicker. Equal outputs
    # may pickle differently (shared strings), which only makes the text again.
    version = hashlib.sha256(json.dumps(facts).encode() + pickle.dumps(outputs, protocol=5)).hexdigest()
    with cache_errors(store):
        made = kept(store / f"{path_name(page.path)}.ipynb", version,
                    lambda: v4.writes(to_notebook(page, outputs, install)).encode())
    return made.decode()


def to_notebook(page: ParsedPage, outputs: PageOutputs | None, install: Install | None = None) -> NotebookNode:
    """Inline values are filled in (as text, escaped as on the page) and block outputs attached
    when the page has run. With `install`, the notebook starts with the install cell (one for a
    kernel that has lessonlib already, as the tests run it in this checkout, has none)."""
    blocks_out, values = (outputs.blocks, outputs.values) if outputs else (None, None)
    cells = [install_cell(install)] if install else []
    cells.append(_code(SETUP, "setup"))
    prose: list[str] = []
    line = 0

    src_uri = PurePosixPath(page.path).relative_to(install.docs).as_posix() if install else ""

    def flush() -> None:
        text = "".join(prose).strip()
        if text and install:  # published: links lead to the site's pages
            text = site_links(text, src_uri, install.site)
        if text:
            cells.append(from_dict({"cell_type": "markdown", "metadata": {}, "source": text}))
        prose.clear()

    for index, block in enumerate(page.blocks):
        prose.extend(render_line(page, i, values) for i in range(line, block.start))
        output, line = blocks_out[index] if blocks_out else None, block.end
        if block.kind == SOURCE:  # read, not run: code in the Markdown, with the prose around it
            prose.append(source_markdown(output.source if output else None, block.options[SOURCE], titled=False))
            continue
        flush()
        cells.extend(_examples(block) if block.kind == "pycon" else [_code_cell(block, output)])
    prose.extend(render_line(page, i, values) for i in range(line, len(page.lines)))
    flush()
    for number, cell in enumerate(cells):
        cell.id = f"cell-{number}"  # nbformat's ids are random; the same page must export the same bytes
    kernel = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return from_dict({"nbformat": v4.nbformat, "nbformat_minor": v4.nbformat_minor,
                      "metadata": {"kernelspec": kernel}, "cells": cells})


def _code(source: str, tag: str | None = None, outputs: tuple[dict, ...] = ()) -> NotebookNode:
    """A code cell, built as plain data: nbformat's new_code_cell validates every cell, which
    costs more than the rest of the export."""
    metadata = {"tags": [tag]} if tag else {}
    if tag == "check":  # the page's evidence: there to run and read, folded away in Jupyter
        metadata["jupyter"] = {"source_hidden": True}
    return from_dict({"cell_type": "code", "execution_count": None, "metadata": metadata,
                      "source": source, "outputs": list(outputs)})


def _code_cell(block: Block, output: BlockOutput | None) -> NotebookNode:
    outputs = []
    if output is not None:
        if output.text:
            outputs.append({"output_type": "stream", "name": "stdout", "text": output.text})
        outputs += [{"output_type": "display_data", "metadata": {},
                     "data": {"image/svg+xml": figure.svg, "text/plain": figure.alt}} for figure in output.figures]
        outputs += [{"output_type": "display_data", "metadata": {},
                     "data": {"text/markdown": markdown_table(table),
                              "text/plain": DATA_TITLE}} for table in output.tables]
    tag = "check" if block.check else "timing" if "timing" in block.options else None
    code = _as_typed(block.code.rstrip())
    if "memo" in block.options:  # as on the page: these calls come from the cache
        code = f'with lessonlib.memoized(globals(), "{block.options["memo"]}"):\n{_indented(code)}'
    cell = _code(_quiet(code), tag, tuple(outputs))
    hidden = {folded: True for option, folded in HIDDEN.items() if option in block.options}
    if hidden:  # folded in Jupyter, as the page hides it
        cell.metadata.setdefault("jupyter", {}).update(hidden)
    return cell


def _indented(code: str) -> str:
    """The code one level in, but for the lines that continue a string (their text is its text)."""
    in_string = _string_lines(code)
    rows = code.split("\n")
    return "\n".join(row if n in in_string or not row.strip() else f"    {row}" for n, row in enumerate(rows, 1))


def _string_lines(code: str) -> dict[int, str]:
    """The lines (1-based) that continue a string, each with what opens that string (`r'''`)."""
    lines: dict[int, str] = {}
    f_strings = []  # Python 3.12 reads an f-string as tokens: where each open one starts
    for token in tokenize.generate_tokens(io.StringIO(code).readline):
        if token.type == _FSTRING_START:
            f_strings.append(token)
            continue
        if token.type == _FSTRING_END:
            start = f_strings.pop()
            first, opener = start.start[0], start.string
        elif token.type == tokenize.STRING:
            first, opener = token.start[0], _OPENER.match(token.string).group(0)
        else:
            continue
        for n in range(first + 1, token.end[0] + 1):
            lines.setdefault(n, opener)  # an inner string's lines are its own
    return lines


_FSTRING_START, _FSTRING_END = (getattr(tokenize, name, None) for name in ("FSTRING_START", "FSTRING_END"))
_OPENER = re.compile(r"""\w*('''|\"\"\"|'|")""")  # a string's prefix and quote
# A line that IPython changes before Python reads it, in a string too: it strips prompts (>>>, ...,
# In [1]:) from a cell's lines, and IPython 9 dedents the cell, which empties lines of blanks.
_TYPED_AWAY = re.compile(r"\s*(?:>>>|\.\.\.|(?:\[\w+\] )?In \[\d+\]:)|\s+$")


def _as_typed(code: str) -> str:
    """The code as a cell that IPython reads as the page's Python did. Jupyter reads a cell as
    typed at IPython's prompt: it strips prompts from its lines, a string's lines too, and
    IPython 8 (Colab's) strips a first line's indent from every line. So a string's line that
    starts with a prompt or is blank starts by closing the string and opening it again
    (`'''>>> 1 + 1` in a '''-string), which Python joins back into the one string, and a first
    line (a comment) loses its indent. Where that would change the program (a line inside an
    f-string's braces), the code is left as it is."""
    rows = code.split("\n")
    strings = _string_lines(code) if any(map(_TYPED_AWAY.match, rows[1:])) else {}  # tokenizing is slow
    for n, opener in strings.items():
        if _TYPED_AWAY.match(rows[n - 1]):
            rows[n - 1] = _OPENER.match(opener).group(1) + opener + rows[n - 1]
    first = next((n for n, row in enumerate(rows) if row.strip()), 0)
    rows[first] = rows[first].lstrip()
    typed = "\n".join(rows)
    if typed == code:
        return code
    try:
        return typed if ast.dump(ast.parse(typed)) == ast.dump(ast.parse(code)) else code
    except SyntaxError:
        return code


def _examples(block: Block) -> list[NotebookNode]:
    import doctest  # here: a warm build reuses its notebooks and need not load it

    cells = []
    for example in doctest.DocTestParser().get_examples(block.code):
        want = example.want.rstrip("\n")
        result = {"output_type": "execute_result", "execution_count": None, "metadata": {},
                  "data": {"text/plain": want}}
        cells.append(_code(_as_typed(example.source.rstrip()), "pycon", (result,) if example.want else ()))
    return cells


def _quiet(code: str) -> str:
    """A page shows what a block prints, not the value of its last line (a notebook would):
    end such a line with a semicolon, which silences it."""
    try:
        last = ast.parse(code).body[-1] if code.strip() else None
    except SyntaxError:
        return code
    if not isinstance(last, ast.Expr) or (isinstance(last.value, ast.Call) and _is_print(last.value)):
        return code
    lines = code.split("\n")
    row = lines[last.end_lineno - 1].encode()  # col offsets count bytes
    if row[last.end_col_offset:].lstrip().startswith(b";"):
        return code  # silenced already
    lines[last.end_lineno - 1] = (row[: last.end_col_offset] + b";" + row[last.end_col_offset:]).decode()
    return "\n".join(lines)


def _is_print(call: ast.Call) -> bool:
    return isinstance(call.func, ast.Name) and call.func.id == "print"

