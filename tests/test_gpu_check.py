"""scripts/gpu_check on a machine without a GPU: its dry run, its refusal to run, and the part
that needs no GPU to be checked: reading `python -m lessonlib run` output and comparing numbers."""
from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
import script_modules
import torch

page_runs = importlib.import_module("page_runs")  # scripts/page_runs.py: script_modules put scripts/ on the path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_check"
gpu_check = script_modules.load("gpu_check")


def _gpu_check(temp: Path, *args: str) -> subprocess.CompletedProcess:
    """scripts/gpu_check with a TMPDIR of its own, `temp`."""
    temp.mkdir()
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "TMPDIR": str(temp)})


def test_dry_run_prints_every_step_and_runs_nothing(tmp_path):
    report = tmp_path / "report.md"
    result = _gpu_check(tmp_path / "temp", "--dry-run", "--report", str(report))
    assert result.returncode == 0, result.stderr
    for step in ("tests", "pages-cpu", "pages-cuda", "build", "memory", "bench"):
        assert f". {step}: " in result.stdout
    assert "-k cuda" in result.stdout and "LESSONLIB_DEVICE=cuda" in result.stdout
    assert "scripts/bench_memory_task.py" in result.stdout and "scripts/bench_build.py" in result.stdout
    for page in page_runs.pages():
        assert page in result.stdout
    assert not report.exists() and not any((tmp_path / "temp").iterdir())


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_without_cuda_it_stops_and_says_so(tmp_path):
    report = tmp_path / "report.md"
    result = _gpu_check(tmp_path / "temp", "--python", sys.executable, "--report", str(report))
    assert result.returncode == 2
    assert "no CUDA device" in result.stderr and "--dry-run" in result.stderr
    assert not report.exists() and not any((tmp_path / "temp").iterdir())


def test_numbers_are_read_as_printed():
    assert page_runs.numbers("loss 0.250, −1.5e-3 and 100,000 steps; ratio 3.86x") == [0.25, -1.5e-3, 100000, 3.86]


def test_compare_finds_each_changed_number_and_leaves_timing_blocks_out():
    cpu = ("--- docs/a.md:3 (exec)\naccuracy 0.912 after 40 steps\n"
           "--- docs/a.md:9 (exec)\ntook 12.5 ms\n"
           "--- docs/a.md:20 `{py} acc:.2f` = 0.91\n"
           "--- docs/b.md:5 (pycon)\n--- docs/b.md:8 (exec)\n[figure: 3 curves rise to 0.5]\n")
    cuda = cpu.replace("0.912", "0.913").replace("12.5", "1.2").replace("3 curves", "3 or 4 curves")
    diffs = page_runs.compare(cpu, cuda, timing_lines={"docs/a.md": {9}})
    a, b = diffs["docs/a.md"], diffs["docs/b.md"]
    assert a.differing == [("docs/a.md:3", 0.912, 0.913)]
    assert a.compared == 2 + 1  # block 3's two numbers and the inline value; block 9 is a timing block
    assert a.timing == ["docs/a.md:9"] and a.largest == pytest.approx(0.001 / 0.913)
    assert b.changed_shape == ["docs/b.md:8"] and not b.differing


def test_compare_reads_the_real_cli_output(tmp_path, lessonlib_cli):
    # one page run by the engine's command line: compared with itself, nothing differs; with one
    # printed number changed outside a timing block, exactly that one is found
    page = "docs/writing-lessons.md"
    result = lessonlib_cli(ROOT, "run", page, LESSONLIB_CACHE_DIR=str(tmp_path / "cache"))  # a cold run: its seconds
    assert result.returncode == 0, result.stderr
    timing = page_runs.timing_blocks([page])
    assert timing[page], "the page has a timing block to leave out"
    same = page_runs.compare(result.stdout, result.stdout, timing)[page]
    assert same.compared > 5 and not same.differing and not same.changed_shape
    assert len(same.timing) == len(timing[page])
    assert page_runs.seconds_per_page(result.stderr)[page] > 0
    changed = page_runs.compare(result.stdout, result.stdout.replace("norm of [3.0, 4.0] is 5.0",
                                                                     "norm of [3.0, 4.0] is 5.5"), timing)[page]
    assert [(a, b) for _, a, b in changed.differing] == [(5.0, 5.5)]

    # the report: one row per page, the changed number named
    steps = gpu_check.plan(sys.executable, tmp_path)
    for step in steps:
        step.status = "pass"
    by_name = {step.name: step for step in steps}
    by_name["pages-cpu"].stdout, by_name["pages-cpu"].stderr = result.stdout, result.stderr
    by_name["pages-cuda"].stdout = result.stdout.replace("is 5.0", "is 5.5")
    by_name["pages-cuda"].stderr = result.stderr
    text, ok = gpu_check.report(steps, tmp_path, "a test")
    assert ok and f"| {page} | {changed.compared} | 1 |" in text
    assert "CPU 5, CUDA 5.5" in text
    by_name["bench"].status = "FAIL (out of time)"
    assert gpu_check.report(steps, tmp_path, "a test")[1] is False


def test_failures_name_every_failed_assert_of_a_keep_going_run(tmp_path, lessonlib_cli):
    """Two pages: one with two failed asserts and then an error, one that passes and still prints."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "bad.md").write_text("```python exec\nassert 1 == 2, 'one'\nx = 1\nassert x == 2\n"
                                              "```\n\n```python exec\nraise ValueError('stop')\n```\n")
    (tmp_path / "docs" / "good.md").write_text("```python exec\nprint('value 42')\n```\n")
    result = lessonlib_cli(tmp_path, "run", "--keep-going", "docs/bad.md", "docs/good.md",
                           LESSONLIB_CACHE_DIR=str(tmp_path / "cache"))
    assert result.returncode == 1
    assert page_runs.failures(result.stderr) == {
        "docs/bad.md": ["2: one", "4: assertion failed: assert x == 2", "8: ValueError: stop"]}
    # the failing page's blocks that ran are printed too (here the first, which prints nothing)
    assert page_runs.sections(result.stdout) == {"docs/bad.md:1": "", "docs/good.md:1": "value 42\n"}
