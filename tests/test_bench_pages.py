"""scripts/bench_pages.py: reading a run's stderr, and pairing a page's moved lines."""
from __future__ import annotations

from script_modules import SCRIPTS, load  # noqa: F401  (puts scripts/ on the path)

bench_pages = load("bench_pages.py")


def test_calls_are_numbered_by_name_and_given_the_page_that_ran_them():
    stderr = ("lessonlib.experiments.memory_task.sweep: computed in 17.6 s\n"
              "memory task:  50%|#####| 1/2\rlessonlib.experiments.memory_task.sweep: computed in 4.0 s\n"
              "[1/2] docs/lessons/a.md: ran 9 blocks in 30.50 s\n"
              "lessonlib.models.seq2seq.train_both: computed in 20.0 s\n"
              "[2/2] docs/lessons/b.md: ran 3 blocks in 25.00 s\n")
    assert bench_pages.calls_of(stderr) == [
        ("docs/lessons/a.md", "memory_task.sweep #1", 17.6), ("docs/lessons/a.md", "memory_task.sweep #2", 4.0),
        ("docs/lessons/b.md", "seq2seq.train_both #1", 20.0)]


def test_moved_sections_pair_with_the_base_lines(monkeypatch):
    texts = {("base", "docs/p.md"): "a\nb\nc\nd\n", ("head", "docs/p.md"): "a\nd\n"}
    monkeypatch.setattr(bench_pages, "page_text", lambda revision, page: texts[revision, page])
    output = "--- docs/p.md:2 (exec)\n1.5\n--- docs/p.md:1 `{py} x` = 3\n"
    moved = bench_pages.renumbered(output, ["docs/p.md"], "base", "head")
    assert moved == "--- docs/p.md:4 (exec)\n1.5\n--- docs/p.md:1 `{py} x` = 3\n"


def test_calls_of_several_pages_are_numbered_across_them():
    stderr = ("x.sweep: computed in 1.0 s\n[1/1] docs/a.md: ran 1 blocks in 2.00 s\n"
              "x.sweep: computed in 3.0 s\n[1/1] docs/b.md: ran 1 blocks in 4.00 s\n")
    assert bench_pages.calls_of(stderr) == [("docs/a.md", "x.sweep #1", 1.0), ("docs/b.md", "x.sweep #2", 3.0)]
