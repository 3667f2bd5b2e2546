"""Every notebook the site offers, downloaded and run where this repository is not: in a fresh
virtual environment that has only Jupyter's kernel (ipykernel) until the notebook's first cell
installs lessonlib from the site's own wheel with the pinned packages, from a folder that holds
only the notebook, with the built site served at its site_url (the `site` fixture).

A lesson's notebook must print what its page printed, block by block (timings apart), show as
many figures, and give each example's output. An exercise is published unsolved (the page shows
no outputs); it is run with its published solutions in the reader's cells, and every check
must pass.

Cost: one venv per test process (ipykernel, then torch and the rest on the first notebook's
install), and every notebook computed from scratch: a reader's kernel has no memo store, so the
lessons' experiments run in full, as on a cold build (the build's memo cannot serve them: its
keys include the installed distributions, which differ here by design). The first notebook also
pays for installing torch and the rest; the lesson with the memory-task sweep is the longest.
"""
from __future__ import annotations

import doctest
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from notebook_cells import printed, solution_code, tagged, text

from lessonlib.engine.worker.session import DOCTEST_FLAGS

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
LESSONS = sorted(p.stem for p in (DOCS / "lessons").glob("*.md"))
# Each exercise's reader cells, by tag, and the summary of the collapsed solution that fills each.
EXERCISES = {
    "exercise-attention": {"exercise": "Solution", "exercise-mask": "Solution, part 2"},
    "exercise-transformer": {"exercise-mask": "Solution: causal_mask", "exercise-attention": "Solution: masked_attention",
                             "exercise-heads": "Solution: split_heads and merge_heads"},
    "exercise-language-model": {"exercise-sample": "Solution: sample", "exercise-train-chunk": "Solution: train_chunk"},
    "exercise-scan": {"exercise-combine": "Solution: combine", "exercise-scan": "Solution: scan"},
    "exercise-delta-rule": {"exercise-read": "Solution: read", "exercise-step": "Solution: delta_step"},
    "exercise-rnn": {"exercise-cell": "Solution: rnn_cell", "exercise-forward": "Solution: rnn_forward",
                     "exercise-train": "Solution: train"},
}
KERNEL = "fresh-python3"
# What the kernel keeps of this process's environment: where pip finds packages, and nothing of
# this checkout (no PYTHONPATH, no LESSONLIB_* settings).
PASSED_ON = ("HOME", "LANG", "TMPDIR", "http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY")


@pytest.fixture(scope="session")
def fresh_kernels(request, tmp_path_factory) -> Path:
    """A Jupyter path whose kernel KERNEL runs a fresh venv's Python with the bare environment
    above: ipykernel (pinned) and nothing of the project. The tests ask for it before `site`:
    without --fresh-notebooks they skip here, before the site is built for them."""
    if not request.config.getoption("--fresh-notebooks"):
        pytest.skip("the fresh-venv notebook runs take about 20 minutes on 2 cores, more than the suite's "
                    "budget: scripts/check_notebooks (pytest --fresh-notebooks) runs them")
    where = tmp_path_factory.mktemp("fresh")
    venv = where / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    install = subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--constraint", str(ROOT / "constraints.txt"),
                              "ipykernel"], capture_output=True, text=True, timeout=600)
    assert install.returncode == 0, install.stderr
    found = subprocess.run([str(python), "-c", "import importlib.util as u; print(u.find_spec('lessonlib'), u.find_spec('torch'))"],
                           capture_output=True, text=True, env=_bare_environment(venv), cwd=where)  # not this checkout
    assert found.stdout.split() == ["None", "None"], f"the fresh venv sees the project: {found.stdout}{found.stderr}"
    spec = where / "jupyter" / "kernels" / KERNEL
    spec.mkdir(parents=True)
    variables = [f"{k}={v}" for k, v in _bare_environment(venv).items()]
    argv = ["/usr/bin/env", "-i", *variables, str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": "fresh venv", "language": "python"}))
    return where / "jupyter"


def _bare_environment(venv: Path) -> dict[str, str]:
    kept = {k: v for k, v in os.environ.items() if k in PASSED_ON or k.startswith("PIP_")}
    return {**kept, "PATH": f"{venv / 'bin'}:/usr/bin:/bin", "VIRTUAL_ENV": str(venv)}


def run_downloaded(site, name: str, kernels: Path, tmp_path: Path, monkeypatch, fill: dict[str, str] | None = None):
    """The notebook `name` as the site offers it (published copy and a freshly run one)."""
    (source,) = site.path.glob(f"lessons/{name}/{name}.ipynb")
    published = nbformat.read(source, as_version=4)
    nb = nbformat.read(source, as_version=4)
    for tag, summary in (fill or {}).items():
        tagged(nb, tag).source = solution_code(nb, summary)
    folder = tmp_path / "reader"
    folder.mkdir()
    shutil.copy(source, folder)
    monkeypatch.setenv("JUPYTER_PATH", str(kernels))
    NotebookClient(nb, timeout=1200, kernel_name=KERNEL, resources={"metadata": {"path": str(folder)}}).execute()
    return published, nb


@pytest.mark.timeout(2400)
@pytest.mark.parametrize("name", LESSONS)
def test_a_downloaded_lesson_runs_anywhere_and_prints_what_its_page_printed(fresh_kernels, site, tmp_path, monkeypatch, name):
    published, ran = run_downloaded(site, name, fresh_kernels, tmp_path, monkeypatch)
    compared = 0
    for want, got in zip(published.cells, ran.cells, strict=True):
        tags = set(want.metadata.get("tags", []))
        if want.cell_type != "code" or tags & {"install", "setup", "timing"}:
            continue
        where = f"{name}, cell {want.id}: {want.source.splitlines()[0][:60]!r}"
        if "pycon" in tags:
            expected = "".join(o.data["text/plain"] for o in want.outputs)
            assert doctest.OutputChecker().check_output(expected + "\n", text(got) + "\n", DOCTEST_FLAGS), where
        else:
            assert _printed_without_progress(got) == printed(want), f"{where}: printed something else"
            assert _images(got) == _images(want), f"{where}: figures differ"
        compared += 1
    assert compared > 0


@pytest.mark.timeout(2400)
@pytest.mark.parametrize("name", sorted(EXERCISES))
def test_a_downloaded_exercise_runs_anywhere_with_its_solutions(fresh_kernels, site, tmp_path, monkeypatch, name):
    published, ran = run_downloaded(site, name, fresh_kernels, tmp_path, monkeypatch, EXERCISES[name])
    assert published.cells[0].metadata.tags == ["install"]
    report = "".join(text(c) for c in ran.cells)
    checks = [c for c in ran.cells if any(t.startswith("check") for t in c.metadata.get("tags", []))]
    assert checks and all("✓" in text(c) for c in checks), report
    assert "✗" not in report, report


def _printed_without_progress(cell) -> str:
    """What the cell printed, less lessonlib.progress's bars: in a kernel they redraw (\r) on its
    stderr; a page sends them to the build's terminal, so they are not in the page's output."""
    return "".join(o.text for o in cell.get("outputs", [])
                   if o.output_type == "stream" and not (o.name == "stderr" and "\r" in o.text))


def _images(cell) -> int:
    return sum(1 for o in cell.get("outputs", []) if o.output_type == "display_data" and any(k.startswith("image/") for k in o.data))
