"""Claims bound to the checks that back them.

A claim is a sentence of the page that compares, generalises or gives a cause ("cheaper than",
"never", "because" ...: CLAIM_WORDS). The assert that checks it quotes it, or a phrase of it:

    assert (gap >= -0.02).all(), claim("never better than teacher forcing")

Every sentence a reader meets is read: paragraphs, list items, knowledge-check answers, table
cells, HTML blocks, and figures' alt texts and captions. `lessonlib check` fails when a quoted
phrase is shorter than MIN_WORDS words, is in no sentence (the sentence was edited away from its
check) or in more than one, or is quoted where it may never run (see `_runs`); and it lists each
claim-like sentence that no check quotes, unless the page marks it `<!-- not a claim -->` (a
definition, a plan, a question). The page's collapsed "How this page checks its claims" shows
each quoted sentence above the code that checks it (lessonlib.engine.builder.render).
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass, replace
from html.parser import HTMLParser

from markdown_it import MarkdownIt
from markdown_it.token import Token

from lessonlib.engine.worker.blocks import Block, ParsedPage, parse_page

# Words a careful reviewer stops at: a comparison, a generalisation, a cause, an outcome.
CLAIM_WORDS = re.compile(
    r"\b(?:than|faster|slower|cheaper|costlier|better|worse|always|never|because|hence|therefore|"
    r"diverg\w*|solv(?:e|es|ed)|fail(?:s|ed)?|fatal|isolat\w*|caus(?:e|es|ed)|cannot|impossible|"
    r"outperform\w*|beats?)\b",
    re.IGNORECASE,
)
MIN_WORDS = 3  # a shorter phrase ("", "the", "is faster") could be anywhere on the page
NOT_A_CLAIM = re.compile(r"<!--\s*not a claim\b.*?-->", re.IGNORECASE | re.DOTALL)
_MARK = "\u2063"  # where a "not a claim" comment stood (an invisible separator, never in prose)
_BOUNDARY = re.compile(r"(?<=[.!?])[\"”')*_]*\s+(?=[\"“(*_`A-Z0-9])|(?<=\u2063)\s*")
_ADMONITION = re.compile(r'^\s*[?!]{3}\+?\s+[\w-]+(?:\s+"[^"]*")?\s*$')
_md = MarkdownIt("commonmark").disable("code").enable("table")
# Statements whose body may not run: a claim under them is not bound.
_MAY_NOT_RUN = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.If, ast.IfExp, ast.While,
                ast.ExceptHandler, ast.Match)


@dataclass(frozen=True)
class Sentence:
    line: int  # 1-based Markdown line where it starts
    text: str  # its words; code spans (inline values among them) as written
    marked: bool  # marked as not a claim
    figure: str = ""  # "alt" or "caption" when it is a figure's text (its {fields} as written), on the fence's line

    @property
    def claim_like(self) -> bool:
        return CLAIM_WORDS.search(self.text) is not None


@dataclass(frozen=True)
class Claim:
    phrase: str  # as quoted by the check
    line: int  # 1-based Markdown line of the claim call
    block: Block
    runs: bool  # the message of an assert that runs whenever its block does


def sentences(page_text: str) -> list[Sentence]:
    """Every sentence a reader meets: prose, list items, table cells and HTML blocks outside code
    and headings, then figures' alt texts and captions, in order of lines."""
    found = []
    for token in _md.parse(page_text):
        if token.type == "inline" and token.map and not _under_heading(token):
            found += _split(_lines_of(token))
        elif token.type == "html_block" and token.map and not NOT_A_CLAIM.fullmatch(token.content.strip()):
            found += _split(_html_lines(token))
    for block in parse_page(page_text, "<page>").blocks:
        for option in ("alt", "caption"):
            if block.options.get(option, "").strip():
                found += [replace(s, figure=option) for s in _split([(block.start + 1, block.options[option])])]
    return sorted(found, key=lambda s: s.line)


def claims(page: ParsedPage) -> list[Claim]:
    """Every `claim("phrase", ...)` call in the page's exec blocks, in order."""
    found = []
    for block in page.blocks:
        if block.kind != "exec":
            continue
        try:
            tree = ast.parse(block.code)
        except SyntaxError:  # the run reports it, at its line
            continue
        running = {id(node) for node in _runs(tree.body)}
        found += [Claim(node.args[0].value, block.first_line + node.lineno - 1, block, id(node) in running)
                  for node in ast.walk(tree) if _is_claim(node)]
    return sorted(found, key=lambda c: c.line)


@dataclass(frozen=True)
class Binding:
    """What `lessonlib check` reports for a page."""

    wrong: list[tuple[Claim, str]]  # quoted phrases that bind nothing, and why
    unbound: list[Sentence]  # claim-like sentences no check quotes, not marked
    flagged: int  # claim-like sentences
    bound: int  # of those, quoted by a check
    marked: int  # of those, marked as not a claim

    def problems(self) -> list[tuple[int, str]]:
        """(line, what is wrong), in the page's order."""
        return sorted([(c.line, why) for c, why in self.wrong]
                      + [(s.line, f"a claim no check quotes: {s.text!r}") for s in self.unbound])

    def counts(self) -> str:
        return (f"{self.flagged} claim-like sentences: {self.bound} quoted by a check, "
                f"{self.marked} marked not a claim, {len(self.unbound)} neither")


def segments(block: Block) -> list[tuple[list[str], list[str]]]:
    """The block's code cut after each statement that holds claims: [(phrases, code lines)],
    so that each claim's sentence can stand above the code that checks it."""
    rows = block.code.rstrip().split("\n")
    try:
        body = ast.parse(block.code).body
    except SyntaxError:
        return [([], rows)]
    found, begin = [], 0
    for statement in body:
        phrases = [c.args[0].value for c in ast.walk(statement) if _is_claim(c)]
        if phrases:
            found.append((phrases, rows[begin:statement.end_lineno]))
            begin = statement.end_lineno
    if begin < len(rows):
        found.append(([], rows[begin:]))
    return found


def binding(page: ParsedPage, page_text: str) -> Binding:
    said = sentences(page_text)
    wrong, binds = [], []
    for c in claims(page):
        why = _why_not_bound(c, said)
        if why:
            wrong.append((c, why))
        else:
            binds.append(c)
    flagged = [s for s in said if s.claim_like]
    bound = [s for s in flagged if any(_normal(c.phrase) in _normal(s.text) for c in binds)]
    marked = [s for s in flagged if s.marked and s not in bound]
    unbound = [s for s in flagged if s not in bound and s not in marked]
    return Binding(wrong, unbound, len(flagged), len(bound), len(marked))


def sentence_of(phrase: str, said: list[Sentence]) -> Sentence | None:
    """The first sentence that holds the phrase (spaces and line breaks aside)."""
    return next((s for s in said if _normal(phrase) in _normal(s.text)), None)


def _why_not_bound(c: Claim, said: list[Sentence]) -> str | None:
    if len(c.phrase.split()) < MIN_WORDS:
        return f"the check quotes {c.phrase!r}: a phrase of at least {MIN_WORDS} words is needed to name a sentence"
    holding = [s for s in said if _normal(c.phrase) in _normal(s.text)]
    if not holding:
        return f"the check quotes {c.phrase!r}, which the prose no longer says"
    if len(holding) > 1:
        return (f"the check quotes {c.phrase!r}, which is in {len(holding)} sentences: "
                + "; ".join(f"line {s.line}: {s.text!r}" for s in holding) + " (quote more of the one it checks)")
    if not c.runs:
        return (f"the check quotes {c.phrase!r} where it may never run: make it the message of an assert "
                "outside any def, lambda, class, if, while, match or except")
    return None


def _runs(body: list[ast.stmt]) -> list[ast.AST]:
    """The claim calls that are assert messages in statements that run whenever `body` does:
    not under a def, lambda, class, if, while, match or except (a for loop's body is taken to run)."""
    found = []
    for statement in body:
        if isinstance(statement, ast.Assert) and statement.msg is not None and _is_claim(statement.msg):
            found.append(statement.msg)
        elif not isinstance(statement, _MAY_NOT_RUN):
            for field in ("body", "orelse", "finalbody"):
                inner = getattr(statement, field, None)
                skipped = isinstance(statement, ast.For | ast.AsyncFor) and field == "orelse"  # after a break, no
                if isinstance(inner, list) and not skipped:
                    found += _runs(inner)
    return found


def _normal(text: str) -> str:
    return " ".join(text.split())


def _is_claim(node: ast.AST) -> bool:
    """A call `claim("phrase", ...)` (or `lessonlib.claim(...)`) quoting a literal phrase."""
    if not isinstance(node, ast.Call) or not node.args:
        return False
    name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
    first = node.args[0]
    return name == "claim" and isinstance(first, ast.Constant) and isinstance(first.value, str)


def _under_heading(token: Token) -> bool:
    return token.level > 0 and token.map is not None and token.content.lstrip().startswith("#")


def _lines_of(token: Token) -> list[tuple[int, str]]:
    """The inline token's text, line by line: (Markdown line, plain text)."""
    lines, line, text = [], token.map[0] + 1, []
    for child in token.children or []:
        if child.type in ("softbreak", "hardbreak"):
            lines.append((line, "".join(text)))
            line, text = line + 1, []
        elif child.type == "text":
            text.append(child.content)
        elif child.type == "code_inline":  # kept as Markdown: the checks list fills in its value
            text.append(f"{child.markup}{child.content}{child.markup}")
        elif child.type == "html_inline" and NOT_A_CLAIM.fullmatch(child.content.strip()):
            text.append(_MARK)
    lines.append((line, "".join(text)))
    return [(n, t) for n, t in lines if not _ADMONITION.match(t)]


class _HtmlText(HTMLParser):
    """An HTML block's text, line by line; scripts and styles are not prose."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[tuple[int, str]] = []
        self._skip = 0

    def handle_starttag(self, tag: str, attrs) -> None:  # noqa: ANN001
        self._skip += tag in ("script", "style")

    def handle_endtag(self, tag: str) -> None:
        self._skip -= tag in ("script", "style") and self._skip > 0

    def handle_data(self, data: str) -> None:
        if not self._skip:
            line = self.getpos()[0]
            for offset, part in enumerate(data.split("\n")):
                self.parts.append((line + offset, part))

    def handle_comment(self, data: str) -> None:
        if NOT_A_CLAIM.fullmatch(f"<!--{data}-->"):
            self.parts.append((self.getpos()[0], _MARK))


def _html_lines(token: Token) -> list[tuple[int, str]]:
    parser = _HtmlText()
    parser.feed(token.content)
    parser.close()
    lines: dict[int, str] = {}
    for line, text in parser.parts:  # a line's pieces between tags are one text
        lines[token.map[0] + line] = lines.get(token.map[0] + line, "") + text
    return [(line, text) for line, text in lines.items() if text.strip()]


def _split(lines: list[tuple[int, str]]) -> list[Sentence]:
    """A paragraph's sentences, each with the line it starts on; a mark ends the sentence before it."""
    text, starts = "", []
    for number, part in lines:
        starts.append((len(text), number))
        text += part + " "
    pieces, begin = [], 0
    for boundary in _BOUNDARY.finditer(text):
        pieces.append((begin, text[begin:boundary.start()]))
        begin = boundary.end()
    pieces.append((begin, text[begin:]))
    return [Sentence(max(n for start, n in starts if start <= begin), piece.replace(_MARK, "").strip(), _MARK in piece)
            for begin, piece in pieces if piece.replace(_MARK, "").strip()]
