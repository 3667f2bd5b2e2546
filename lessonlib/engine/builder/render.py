"""Pure rendering: the page's prose plus its outputs, back to Markdown."""
from __future__ import annotations

import base64
import binascii
import hashlib
import html
import re
from dataclasses import replace

from lessonlib.engine.builder import claims
from lessonlib.engine.worker.blocks import (
    CODE_SPAN,
    SLOT_CLASS,
    SOURCE,
    Block,
    ParsedPage,
    inline_source,
    literal_text,
)
from lessonlib.engine.worker.outputs import BlockOutput, DataTable, Figure, PageOutputs, Source

_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]|])")


def render(page: ParsedPage, outputs: list[BlockOutput] | None, values: dict[str, str] | None, footer: str = "") -> str:
    """Outputs None: nothing was run (code shown, inline expressions shown as code)."""
    out: list[str] = []
    starts = {b.start: (i, b) for i, b in enumerate(page.blocks)}
    i = 0
    while i < len(page.lines):
        if i in starts:
            index, block = starts[i]
            out.extend(_block(page, block, outputs[index] if outputs else None, index))
            i = block.end
            continue
        out.append(render_line(page, i, values))
        i += 1
    text = "".join(out) + checks_appendix(page, values, outputs)
    return f"{text.rstrip()}\n\n{footer}\n" if footer else text


def relocated(outputs: PageOutputs, page: ParsedPage) -> PageOutputs:
    """The outputs (printed text and inline values) with each page line they name moved with its
    block to where the block stands in `page` now: the cache keys on the page's code, not its
    prose, so a cached page's blocks may have moved since they ran. A page line is named as Python
    names it, in a traceback's frame (`File "PATH", line N`) or a warning (`PATH:N: ...`); a line
    outside every block stays."""
    now = [block.start for block in page.blocks]
    if not outputs.fences or outputs.fences == now:
        return outputs
    spans = [(then + 1, then + block.end - block.start, block.start - then)  # 1-based lines, fences included
             for then, block in zip(outputs.fences, page.blocks)]

    def move(named: re.Match[str]) -> str:
        line = int(named.group(2))
        return named.group(1) + str(line + next((by for first, last, by in spans if first <= line <= last), 0))

    where = re.escape(page.path)
    named = re.compile(rf'(File "{where}", line |(?<![\w./-]){where}:)(\d+)')
    blocks = [replace(output, text=named.sub(move, output.text)) for output in outputs.blocks]
    values = {source: named.sub(move, value) for source, value in outputs.values.items()}
    return replace(outputs, blocks=blocks, values=values, fences=now)


CHECKS_TITLE = "How this page checks its claims"
_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*(?:\{[^}]*\})?\s*$")


def checks_appendix(page: ParsedPage, values: dict[str, str] | None = None,
                    outputs: list[BlockOutput] | None = None) -> str:
    """The page's check blocks, gathered at its end in one collapsed block, each under the name
    of the section it runs in: the evidence for the prose, out of the reader's way. Each claim a
    check quotes stands, as the page says it, above the code that checks it (a figure's alt
    text or caption as the figure shows it)."""
    checks = [b for b in page.blocks if b.check]
    if not checks:
        return ""
    said = claims.sentences("".join(page.lines))
    out = [f'\n??? info "{CHECKS_TITLE}"\n\n',
           "    Each sentence quoted below is checked when the site is built, by the code under it: the code\n"
           "    runs where its section stands, and a check that fails stops the build.\n"]
    for block in checks:
        out.append(f"\n    In *{section_of(page, block)}*:\n")
        for phrases, code in claims.segments(block):
            for phrase in phrases:
                sentence = claims.sentence_of(phrase, said)
                quoted = _as_said(sentence, page, values, outputs) if sentence else phrase
                out.append(f"\n    > {quoted}\n")
            out += ["\n    ```python\n", *(f"    {row}\n" if row.strip() else "\n" for row in code), "    ```\n"]
    return "".join(out)


def checks_out_of_search(html: str) -> str:
    """The page's HTML with its checks appendix (as pymdownx.details writes it) marked for the search
    index to leave out: its claims are the page's sentences said again, and its code is evidence."""
    opening = f'<details class="info">\n<summary>{CHECKS_TITLE}</summary>'
    return html.replace(opening, opening.replace(">", " data-search-exclude>", 1), 1)


def _as_said(sentence: claims.Sentence, page: ParsedPage, values: dict[str, str] | None,
             outputs: list[BlockOutput] | None) -> str:
    """The sentence as the reader meets it: inline values filled in; a figure's whole alt text or
    caption as the figure shows it, once the page has run."""
    if not sentence.figure:
        return substitute_inline(sentence.text, values)
    index = next(i for i, b in enumerate(page.blocks) if b.start + 1 == sentence.line)
    figures = outputs[index].figures if outputs else []
    if not figures:
        return _as_text(sentence.text)
    return _as_text(figures[0].alt if sentence.figure == "alt" else figures[0].caption)


def section_of(page: ParsedPage, block: Block) -> str:
    """The title of the heading the block stands under (the page's title before any heading)."""
    for i in range(block.start - 1, -1, -1):
        match = _HEADING.match(page.lines[i]) if page.prose[i] else None
        if match:
            return match.group(1)
    return "the introduction"


def render_line(page: ParsedPage, i: int, values: dict[str, str] | None) -> str:
    """Line i of the page, with inline values filled in, as text, when it is prose (a page and its
    notebook alike: both read Markdown with HTML inside)."""
    return substitute_inline(page.lines[i], values) if page.prose[i] else page.lines[i]


def substitute_inline(line: str, values: dict[str, str] | None) -> str:

    def replace(span: re.Match[str]) -> str:
        literal = literal_text(span)
        if literal is not None:
            return _as_text(literal)
        source = inline_source(span)
        if source is None:
            return span.group(0)
        if values is None:
            return f"`{source}`"
        return _as_text(values[source])

    return CODE_SPAN.sub(replace, line)


def _as_text(value: str) -> str:
    """A value shown as plain text in Markdown, wherever it stands (a paragraph, a heading, a list
    item, a table cell, an HTML attribute): no markup, no HTML, no attribute list ({: ...}), and
    on one line, so that nothing after it can start a block."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", _html_text(" ".join(_markdown_lines(value).split("\n"))))


def _html_text(value: str) -> str:
    """Text that is text in HTML, in an attribute too, and to attr_list (no braces)."""
    return html.escape(value, quote=True).replace("{", "&#123;").replace("}", "&#125;")


def _markdown_lines(text: str) -> str:
    """The text with its line breaks as Markdown will read them (it reads a lone \r as one), and
    without the two characters Markdown keeps for its own placeholders."""
    return text.replace("\r\n", "\n").replace("\r", "\n").replace("\x02", "").replace("\x03", "")


def _block(page: ParsedPage, block: Block, output: BlockOutput | None, index: int) -> list[str]:
    source = page.lines[block.start : block.end]
    if block.kind == "pycon":
        return source
    if block.check:  # shown at the end of the page (checks_appendix)
        return []
    if block.kind == SOURCE:
        shown = source_markdown(output.source if output else None, block.options[SOURCE])
        return [f"{block.indent}{row}\n" if row else "\n" for row in shown.splitlines()]
    lines: list[str] = []
    if "hide-code" not in block.options or output is None:
        marker = re.match(r"\s*(`{3,}|~{3,})", source[0]).group(1)
        lines += [f"{block.indent}{marker}python\n", *source[1:]]
        if not source[-1].endswith("\n"):
            lines[-1] += "\n"
    if output is None:
        return lines
    pieces: list[str] = []
    if output.text and "html" in block.options:
        pieces.append(_slot(index, "html", 0))
    elif output.text and "hide-output" not in block.options:
        pieces.append(_text_output(output.text, timing="timing" in block.options))
    pieces += [_slot(index, "figure", i) for i in range(len(output.figures))]
    pieces += [_slot(index, "table", i) for i in range(len(output.tables))]
    for piece in pieces:
        lines.append("\n")
        lines += [f"{block.indent}{row}\n" if row else "\n" for row in piece.split("\n")]
    if pieces:
        lines.append("\n")
    return lines


# The HTML a block's outputs become (its figures, their data tables, and opt-in markup such as
# an exploration) enters the page after Markdown, in place of a slot: Markdown would only pass
# it through, at a cost that grows with its size (an exploration's frames are hundreds of
# kilobytes, a data table is a Markdown table to parse), and inside a collapsed block it would
# wrap it in a paragraph. A page's prose may not hold this markup (parse_page says so).
_SLOT = f'<div class="{SLOT_CLASS}" data-slot="{{}}-{{}}-{{}}"></div>'
_SLOTS = re.compile(rf'<(p><)?div class="{SLOT_CLASS}" data-slot="(\d+)-(\w+)-(\d+)"></div>(?(1)</p>)')


def _slot(index: int, kind: str, i: int) -> str:
    return _SLOT.format(index, kind, i)


def fill_html_slots(page_html: str, page: ParsedPage, outputs: list[BlockOutput]) -> str:
    """The page's HTML with each slot filled: a block's figure, a figure's data, or what an
    `html` block printed, as it printed it but for its SVG data URIs, linked as files."""
    if SLOT_CLASS not in page_html:
        return page_html

    def fill(slot: re.Match[str]) -> str:
        index, kind, i = int(slot.group(2)), slot.group(3), int(slot.group(4))
        output = outputs[index]
        if kind == "figure":
            return _figure(output.figures[i], timing="timing" in page.blocks[index].options)
        if kind == "table":
            return html_data_table(output.tables[i])
        timing = "timing" in page.blocks[index].options
        return _SVG_DATA_URI.sub(lambda uri: _as_file(uri, timing), output.text.strip())

    return _SLOTS.sub(fill, page_html)


# A `timing` block's output is a wall-clock measurement: marked for readers, and by class
# (TIMING_CLASS) for the checks that compare two builds byte for byte.
TIMING_CLASS = "lessonlib-timing"
TIMING_NOTE = "Measured when the site was built: timings vary from run to run and machine to machine."


def source_markdown(source: Source | None, target: str, titled: bool = True) -> str:
    """A source block as Markdown: the object's code under its file and first line, as the
    fence's title (MkDocs) or a line above it (a notebook, whose Markdown has no titles); before
    the page has run, a note of what will be shown."""
    if source is None:
        return f"*The code of `{target}` is shown here once the page has run.*\n"
    where, fence = f"{source.file}, line {source.line}", _fence(source.code)
    head = f'{fence}python title="{where}"' if titled else f"*{where}*\n\n{fence}python"
    return f"{head}\n{source.code.rstrip()}\n{fence}\n"


def _fence(text: str) -> str:
    """A fence longer than any backtick run inside, so the text can never close it early."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)


def _text_output(text: str, timing: bool = False) -> str:
    text = _markdown_lines(text)  # each line indented as the block is, so none can leave the fence
    fence = _fence(text)  # inside a fence everything, <script> included, is shown as text
    title = "Output (measured timings: they vary from run to run)" if timing else "Output"
    classes = f".text .lessonlib-output{' .' + TIMING_CLASS if timing else ''}"
    return f'{fence} {{ {classes} title="{title}" }}\n{text.rstrip()}\n{fence}'


def figure_files(page: ParsedPage, outputs: list[BlockOutput]) -> dict[str, str]:
    """The SVG files the rendered page links to, by file name: they go next to the page. They
    are its blocks' figures and the SVG images an `html` block printed as data URIs (an
    exploration's frames), which fill_html_slots links as files instead."""
    files = {
        figure_file(f.svg, "timing" in block.options): f.svg
        for block, output in zip(page.blocks, outputs) if block.kind != "pycon"
        for f in output.figures
    }
    for block, output in zip(page.blocks, outputs):
        if "html" in block.options:
            svgs = (_svg_text(uri) for uri in _SVG_DATA_URI.finditer(output.text))
            files.update({figure_file(svg, "timing" in block.options): svg for svg in svgs if svg is not None})
    return {name: _SVG_LINK.sub(_kept_link, svg) for name, svg in files.items()}


# A link in a figure (matplotlib's set_url) is kept only to a web address or an anchor: a
# javascript: or data: URL would run when a reader opens the figure's file. A raster image's data
# (imshow's heatmaps: an <image> of PNG) runs nothing and is the figure's content.
_SVG_LINK = re.compile(r'\s(?:xlink:)?href\s*=\s*(?:"[^"]*"|\'[^\']*\')')
_SAFE_LINK = re.compile(r"(?:https?://|#|data:image/(?:png|jpeg|gif|webp);base64,)", re.IGNORECASE)


def _kept_link(attribute: re.Match[str]) -> str:
    target = html.unescape(attribute.group(0).split("=", 1)[1].strip()[1:-1])
    return attribute.group(0) if _SAFE_LINK.match("".join(target.split())) else ""


# An SVG image an `html` block printed inline (an exploration's frames). Linked as a file, it
# leaves the page's HTML, which shows its text sooner, and is a quarter smaller than its base64
# text; the block's printed markup stays self-contained, as a notebook shows it.
_SVG_DATA_URI = re.compile(r'src="data:image/svg\+xml;base64,([A-Za-z0-9+/]*={0,2})"')


def _svg_text(uri: re.Match[str]) -> str | None:
    """The SVG a data URI holds; None if it is not base64 of UTF-8 text (it then stays inline)."""
    try:
        return base64.b64decode(uri.group(1), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return None


def _as_file(uri: re.Match[str], timing: bool) -> str:
    svg = _svg_text(uri)
    return uri.group(0) if svg is None else f'src="{figure_file(svg, timing)}"'


def figure_file(svg: str, timing: bool = False) -> str:
    """Named by content, so a changed figure gets a new address (no stale copy in a browser's
    cache), and a measured (timing) one can be told apart when two builds are compared."""
    prefix = "timing-figure" if timing else "figure"
    return f"{prefix}-{hashlib.sha256(svg.encode()).hexdigest()[:16]}.svg"


def _figure(figure: Figure, timing: bool = False) -> str:
    # A file beside the page, not a data URI: pages stay small to build, search and load.
    alt = html.escape(figure.alt, quote=True)
    classes = f"lessonlib-figure {TIMING_CLASS}" if timing else "lessonlib-figure"
    note = f'<small class="lessonlib-timing-note">{TIMING_NOTE}</small>' if timing else ""
    caption = f"<figcaption>{html.escape(figure.caption)}</figcaption>" if figure.caption.strip() else ""
    return (
        f'<figure class="{classes}"><img src="{figure_file(figure.svg, timing)}" alt="{alt}">'
        f"{caption}{note}</figure>"
    )


DATA_TITLE = "The data in this figure"


def html_data_table(table: DataTable) -> str:
    """A figure's numbers as a table in a collapsed block, for readers who cannot see it: the
    markup Markdown makes of `??? note` and a table."""
    def row(cells, tag: str) -> str:
        return "<tr>\n" + "".join(f"<{tag}>{_html_text(str(c))}</{tag}>\n" for c in cells) + "</tr>\n"

    body = "".join(row(r, "td") for r in table.rows)
    return (f'<details class="note">\n<summary>{DATA_TITLE}</summary>\n<table>\n<thead>\n{row(table.columns, "th")}'
            f"</thead>\n<tbody>\n{body}</tbody>\n</table>\n</details>")


def markdown_table(table: DataTable) -> str:
    """The same numbers as a Markdown table (a notebook's output)."""
    rows = [table.columns, ["---"] * len(table.columns), *table.rows]
    return "\n".join("| " + " | ".join(_as_text(cell) for cell in row) + " |" for row in rows)
