"""Claims bound to the checks that back them.

A claim is a sentence of the prose that compares, generalises or gives a cause ("cheaper than",
"never", "because" ...: CLAIM_WORDS). The assert that checks it quotes it, or a phrase of it:

    assert (gap >= -0.02).all(), claim("never better than teacher forcing")

`claim` gives the assert's message, which names the sentence. `lessonlib check` fails when a
quoted phrase is no longer in the prose (the sentence was edited away from its check), and lists
each claim-like sentence that no check quotes, unless the page marks it `<!-- not a claim -->`
(a definition, a plan, a question). The page's collapsed "How this page checks its claims" shows
each quoted sentence above the code that checks it (lessonlib.engine.build.render).
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from markdown_it import MarkdownIt
from markdown_it.token import Token

from lessonlib.engine.worker.blocks import Block, ParsedPage

# Words a careful reviewer stops at: a comparison, a generalisation, a cause, an outcome.
CLAIM_WORDS = re.compile(
    r"\b(?:than|faster|slower|cheaper|costlier|better|worse|always|never|because|hence|therefore|"
    r"diverg\w*|solv(?:e|es|ed)|fail(?:s|ed)?|fatal|isolat\w*|caus(?:e|es|ed)|cannot|impossible|"
    r"outperform\w*|beats?)\b",
    re.IGNORECASE,
)
NOT_A_CLAIM = re.compile(r"<!--\s*not a claim\b.*?-->", re.IGNORECASE | re.DOTALL)
_MARK = "\u2063"  # where a "not a claim" comment stood (an invisible separator, never in prose)
_BOUNDARY = re.compile(r"(?<=[.!?])[\"”')*_]*\s+(?=[\"“(*_`A-Z0-9])|(?<=\u2063)\s*")
_ADMONITION = re.compile(r'^\s*[?!]{3}\+?\s+[\w-]+(?:\s+"[^"]*")?\s*$')
_md = MarkdownIt("commonmark").disable("code").enable("table")


@dataclass(frozen=True)
class Sentence:
    line: int  # 1-based Markdown line where it starts
    text: str  # its words; code spans (inline values among them) as written
    marked: bool  # marked as not a claim

    @property
    def claim_like(self) -> bool:
        return CLAIM_WORDS.search(self.text) is not None


@dataclass(frozen=True)
class Claim:
    phrase: str  # as quoted by the check
    line: int  # 1-based Markdown line of the claim call
    block: Block


def claim(phrase: str, detail: object = "") -> str:
    """The message of the assert that checks the sentence quoting `phrase`:
    ``assert (gap >= -0.02).all(), claim("never better than teacher forcing")``."""
    return f"the claim {phrase!r} does not hold" + (f": {detail}" if detail != "" else "")


def sentences(page_text: str) -> list[Sentence]:
    """The prose's sentences, outside code, tables, headings and admonition titles."""
    found, in_table = [], False
    for token in _md.parse(page_text):
        in_table = (in_table or token.type == "table_open") and token.type != "table_close"
        if token.type == "inline" and token.map and not in_table and not _under_heading(token):
            found += _split(_lines_of(token))
    return found


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
        found += [Claim(node.args[0].value, block.first_line + node.lineno - 1, block)
                  for node in ast.walk(tree) if _is_claim(node)]
    return sorted(found, key=lambda c: c.line)


@dataclass(frozen=True)
class Binding:
    """What `lessonlib check` reports for a page."""

    missing: list[Claim]  # quoted phrases no longer in the prose
    unbound: list[Sentence]  # claim-like sentences no check quotes, not marked
    flagged: int  # claim-like sentences
    bound: int  # of those, quoted by a check
    marked: int  # of those, marked as not a claim

    def problems(self) -> list[tuple[int, str]]:
        """(line, what is wrong), in the page's order."""
        lost = [(c.line, f"the check quotes {c.phrase!r}, which the prose no longer says") for c in self.missing]
        return sorted(lost + [(s.line, f"a claim no check quotes: {s.text!r}") for s in self.unbound])

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
    quoted = claims(page)
    missing = [c for c in quoted if sentence_of(c.phrase, said) is None]
    flagged = [s for s in said if s.claim_like]
    bound = [s for s in flagged if any(_normal(c.phrase) in _normal(s.text) for c in quoted)]
    marked = [s for s in flagged if s.marked and s not in bound]
    unbound = [s for s in flagged if s not in bound and s not in marked]
    return Binding(missing, unbound, len(flagged), len(bound), len(marked))


def sentence_of(phrase: str, said: list[Sentence]) -> Sentence | None:
    """The first sentence that holds the phrase (spaces and line breaks aside)."""
    return next((s for s in said if _normal(phrase) in _normal(s.text)), None)


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
