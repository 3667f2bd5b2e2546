"""scripts/bench_pages.py: reading a run's stderr, and pairing a page's moved lines."""
from __future__ import annotations

from pathlib import Path

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


def test_moved_sections_pair_with_the_base_lines(tmp_path: Path):
    base, head = tmp_path / "base", tmp_path / "head"
    for folder, text in ((base, "a\nb\nc\nd\n"), (head, "a\nd\n")):
        (folder / "docs").mkdir(parents=True)
        (folder / "docs" / "p.md").write_text(text)
    output = "--- docs/p.md:2 (exec)\n1.5\n--- docs/p.md:1 `{py} x` = 3\n"
    moved = bench_pages.renumbered(output, ["docs/p.md"], base, head)
    assert moved == "--- docs/p.md:4 (exec)\n1.5\n--- docs/p.md:1 `{py} x` = 3\n"
