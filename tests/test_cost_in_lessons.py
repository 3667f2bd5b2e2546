"""One way of counting cost in every lesson: a page that counts sequential steps links their
definition and counts them with lessonlib.experiments.cost, and nothing else counts them."""
from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path

from lessonlib.engine.builder.claims import sentences
from lessonlib.engine.worker.blocks import parse_page

ROOT = Path(__file__).resolve().parents[1]
DEFINITION = "counting-cost.md#sequential-steps"
LESSONS = sorted(p for p in (ROOT / "docs" / "lessons").glob("*.md") if p.name != "counting-cost.md")
# A sentence that counts how long a computation must wait.
COUNTS_STEPS = re.compile(r"sequential steps?|\bchain of\b|longest chain|one step however long|\bdepth\b", re.I)


def _imports(code: str) -> set[str]:
    """Modules an exec block imports, as dotted names (from a import b gives a.b and a)."""
    found = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def _counts_with_cost(module: str) -> bool:
    """The module is lessonlib.experiments.cost, or a lessonlib module whose source calls cost.count."""
    if module == "lessonlib.experiments.cost":
        return True
    try:
        spec = importlib.util.find_spec(module) if module.startswith("lessonlib.") else None
    except ModuleNotFoundError:  # `from lessonlib.x import SomeClass` names no module
        return False
    return bool(spec and spec.origin and spec.origin.endswith(".py")
                and "cost.count(" in Path(spec.origin).read_text(encoding="utf-8"))


def test_every_lesson_that_counts_steps_links_the_definition_and_counts_with_cost():
    counting_pages, problems = [], []
    for lesson in LESSONS:
        text = lesson.read_text(encoding="utf-8")
        counting = [s for s in sentences(text) if COUNTS_STEPS.search(s.text)]
        if not counting:
            continue
        counting_pages.append(lesson.stem)
        page = parse_page(text, lesson.name)
        modules = set().union(*(_imports(b.code) for b in page.blocks if b.kind == "exec"))
        where = f"{lesson.name}:{counting[0].line}: {counting[0].text!r}"
        if DEFINITION not in text:
            problems.append(f"{where} counts steps, but the page never links {DEFINITION}")
        if not any(_counts_with_cost(m) for m in modules):
            problems.append(f"{where} counts steps, but no block counts them with lessonlib.experiments.cost")
    assert problems == [], "\n".join(problems)
    assert {"transformer", "language-model", "recurrence-returns"} <= set(counting_pages), counting_pages


def test_no_other_code_counts_sequential_steps():
    counters = []
    for path in sorted((ROOT / "lessonlib").rglob("*.py")) + LESSONS:
        if path.name == "cost.py":
            continue
        text = path.read_text(encoding="utf-8")
        counters += [f"{path.relative_to(ROOT)}: {m.group()}" for m in
                     re.finditer(r"sequential_steps\s*:\s*int|def \w*(?:longest_chain|depth)\w*\(|def (?:loop|scan)_cost\(", text)]
    assert counters == [], "\n".join(counters)
