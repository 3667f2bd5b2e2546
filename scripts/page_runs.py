"""Reading and comparing runs of `python -m lessonlib run --keep-going PAGES` (scripts/gpu_check,
scripts/robustness): the numbers each block and inline value printed, and the asserts that failed.
Standard library only."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RAN = re.compile(r"(docs/\S+\.md): ran (\d+) blocks in ([\d.]+) s")
NUMBER = re.compile(r"[-+−]?(?:(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")
HEADER = re.compile(r"^--- (\S+?):(\d+)(?: \((\w+)\)| `\{py\} (.*)` = (.*))$")
LOCATED = re.compile(r"^(docs/\S+\.md):(\d+): (?:earlier, )?(.+)$")  # an error, or one failed assert
SUMMARY = re.compile(r"^\d+ asserts? failed$")  # keep-going's first line, before one line per assert
SAME = 1e-6  # relative difference below which two printed numbers count as equal


def pages() -> list[str]:
    """Every Markdown page under docs/, as paths from the project root (the engine runs those
    with code and says "nothing to run" for the others)."""
    return sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").rglob("*.md"))


def sections(output: str) -> dict[str, str]:
    """`python -m lessonlib run` output split by its headers: {"docs/X.md:LINE": text}; an
    inline value's text is its value."""
    found: dict[str, str] = {}
    key = None
    for line in output.splitlines():
        match = HEADER.match(line)
        if match:
            path, number, _, expr, value = match.groups()
            key = f"{path}:{number}" + (f" {{py}} {expr}" if expr else "")
            found[key] = value if expr else ""
            key = None if expr else key
        elif key is not None:
            found[key] += line + "\n"
    return found


def failures(stderr: str) -> dict[str, list[str]]:
    """Per page, what failed: "LINE: message" for each failed assert (or the error that stopped it)."""
    found: dict[str, list[str]] = {}
    for line in stderr.splitlines():
        match = LOCATED.match(line)
        if match and not SUMMARY.match(match.group(3)):
            page, number, message = match.groups()
            entry = f"{number}: {message}"
            if entry not in found.setdefault(page, []):
                found[page].append(entry)
    return {page: sorted(entries, key=lambda e: int(e.split(":")[0])) for page, entries in found.items()}


def numbers(text: str) -> list[float]:
    return [float(n.replace("−", "-").replace(",", "")) for n in NUMBER.findall(text)]


def relative(a: float, b: float) -> float:
    if a == b:
        return 0.0
    if math.isnan(a) or math.isnan(b):
        return math.inf
    return abs(a - b) / max(abs(a), abs(b))


@dataclass
class PageDiff:
    page: str
    compared: int = 0  # numbers compared outside timing blocks
    differing: list[tuple[str, float, float]] = field(default_factory=list)  # (where, reference, other)
    changed_shape: list[str] = field(default_factory=list)  # sections whose numbers do not pair up
    timing: list[str] = field(default_factory=list)  # timing blocks (measurements, not compared)

    @property
    def largest(self) -> float:
        return max((relative(a, b) for _, a, b in self.differing), default=0.0)


def compare(reference: str, other: str, timing_lines: dict[str, set[int]]) -> dict[str, PageDiff]:
    """Per page, the printed numbers of one run against another's, section by section."""
    ref, oth = sections(reference), sections(other)
    diffs: dict[str, PageDiff] = {}
    for key in ref.keys() | oth.keys():
        page, line = key.split(":")[0], int(key.split(":")[1].split()[0])
        diff = diffs.setdefault(page, PageDiff(page))
        if line in timing_lines.get(page, set()) and "{py}" not in key:
            diff.timing.append(key)
            continue
        a, b = numbers(ref.get(key, "")), numbers(oth.get(key, ""))
        if key not in ref or key not in oth or len(a) != len(b):
            diff.changed_shape.append(key)
            continue
        diff.compared += len(a)
        diff.differing += [(key, x, y) for x, y in zip(a, b) if relative(x, y) > SAME]
    for diff in diffs.values():
        diff.differing.sort(key=lambda d: _line(d[0]))
        diff.changed_shape.sort(key=_line)
    return dict(sorted(diffs.items()))


def _line(key: str) -> int:
    return int(key.split(":")[1].split()[0])


def timing_blocks(paths: list[str]) -> dict[str, set[int]]:
    """Per page, the (1-based) fence lines of its blocks marked `timing`."""
    found = {}
    for path in paths:
        lines = (ROOT / path).read_text(encoding="utf-8").splitlines()
        found[path] = {n for n, line in enumerate(lines, 1) if re.match(r"\s*```python exec\b.*\btiming\b", line)}
    return found


def seconds_per_page(stderr: str) -> dict[str, float]:
    return {page: float(s) for page, _, s in RAN.findall(stderr)}
