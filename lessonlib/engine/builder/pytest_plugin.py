"""The pytest door: every page under docs/ with exec or pycon blocks is one test item, and
every page the option `checked_pages` names (glob patterns relative to docs/, none by default)
gets two more, the house rules: every number in its prose comes from code the reader can see (no
numeral typed by hand, no value a hidden block computed), and every claim-like sentence is bound
to the check that quotes it (`python -m lessonlib check`). The settings are read from mkdocs.yml
once a session; a bad one stops the collection in one line, before any page runs.

Each item goes through the build's executor: its page runs in a worker process of its own,
unless the cache holds a result whose every recorded input is unchanged (a fresh clone, as in
CI, has none; LESSONLIB_REFRESH=1 runs everything). Results are stored, so the browser tests'
site build in the same run is warm, and a build that reaches a page while a test runs it waits
for it instead of running it twice. With pytest-xdist, pages run side by side.
"""
from __future__ import annotations

from dataclasses import replace
from fnmatch import fnmatch
from pathlib import Path

import pytest
from mkdocs.exceptions import MkDocsException

from lessonlib.engine.builder.claims import binding
from lessonlib.engine.builder.numerals import hand_typed_numerals, hidden_values
from lessonlib.engine.builder.page import execute_page
from lessonlib.engine.config import Settings, load_settings
from lessonlib.engine.worker.blocks import parse_page
from lessonlib.engine.worker.errors import LessonError, SetupError

_SETTINGS = pytest.StashKey["Settings | SetupError"]()


def session_settings(config: pytest.Config) -> Settings:
    """The settings of the project's mkdocs.yml (at the rootdir), read once a session (a bad
    one is raised again, the same SetupError, for each page that asks)."""
    if _SETTINGS not in config.stash:
        try:
            config.stash[_SETTINGS] = load_settings(Path(config.rootpath) / "mkdocs.yml")
        except SetupError as e:
            config.stash[_SETTINGS] = e
        except MkDocsException as e:  # MkDocs' own refusal (a strict warning, logged above it): one line too
            config.stash[_SETTINGS] = SetupError(f"mkdocs.yml: {e}")
    settings = config.stash[_SETTINGS]
    if isinstance(settings, SetupError):
        raise settings
    return settings


def pytest_collect_file(file_path: Path, parent: pytest.Collector):
    docs = Path(parent.config.rootpath) / "docs"
    if file_path.suffix == ".md" and docs in file_path.parents:
        rel = file_path.relative_to(parent.config.rootpath).as_posix()
        if parse_page(file_path.read_text(encoding="utf-8"), rel).executable:
            return LessonFile.from_parent(parent, path=file_path)
    return None


class LessonFile(pytest.File):
    def collect(self):
        patterns = session_settings(self.config).checked_pages
        in_docs = self.path.relative_to(Path(self.config.rootpath) / "docs").as_posix()
        yield LessonItem.from_parent(self, name="executes")
        if any(fnmatch(in_docs, pattern) for pattern in patterns):
            yield NumeralsItem.from_parent(self, name="numbers-come-from-code")
            yield ClaimsItem.from_parent(self, name="claims-are-checked")

    def repr_failure(self, excinfo, style=None):
        return str(excinfo.value) if isinstance(excinfo.value, SetupError) else super().repr_failure(excinfo, style)


class NumeralsItem(pytest.Item):
    def runtest(self) -> None:
        rel = self.path.relative_to(self.config.rootpath).as_posix()
        text = self.path.read_text(encoding="utf-8")
        found = sorted([*hand_typed_numerals(text), *hidden_values(text, rel)], key=lambda n: n.line)
        if found:
            raise LessonError(rel, found[0].line, f"{len(found)} numbers typed by hand or computed out of sight",
                              "\n".join(f"{rel}:{n.line}: {n}" for n in found))

    def repr_failure(self, excinfo, style=None):
        return str(excinfo.value) if isinstance(excinfo.value, LessonError) else super().repr_failure(excinfo, style)

    def reportinfo(self):
        return self.path, None, f"{self.path.name}: every number in prose comes from code the reader can see"


class ClaimsItem(NumeralsItem):
    def runtest(self) -> None:
        rel = self.path.relative_to(self.config.rootpath).as_posix()
        text = self.path.read_text(encoding="utf-8")
        problems = binding(parse_page(text, rel), text).problems()
        if problems:
            raise LessonError(rel, problems[0][0], f"{len(problems)} claims not bound to a check",
                              "\n".join(f"{rel}:{line}: {what}" for line, what in problems))

    def reportinfo(self):
        return self.path, None, f"{self.path.name}: every claim is quoted by the check that backs it"


class LessonItem(pytest.Item):
    def runtest(self) -> None:
        root = Path(self.config.rootpath)
        settings = replace(session_settings(self.config), execute=True)
        rel = self.path.relative_to(root).as_posix()
        execute_page(self.path.read_text(encoding="utf-8"), rel, settings)

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, (LessonError, SetupError)):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style)

    def reportinfo(self):
        return self.path, None, f"{self.path.name}: every block, doctest, assert and inline value"
