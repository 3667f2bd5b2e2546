"""scripts/robustness without running the pages: its plan and its report (the part that reads runs)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import script_modules

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "robustness"
robustness = script_modules.load("robustness")


def test_the_plan_has_every_perturbation_and_avx2_only_where_the_cpu_offers_more():
    names = [run.name for run in robustness.plan("AVX2")]
    assert names == ["baseline", "cpu-default", "subnormals", "threads-2", "busy-core"]
    assert "cpu-avx2" in [run.name for run in robustness.plan("AVX512")]
    runs = {run.name: run for run in robustness.plan("AVX2")}
    assert runs["cpu-default"].env == {"ATEN_CPU_CAPABILITY": "default"}
    assert runs["threads-2"].env["LESSONLIB_PERTURB"] == "threads=2" and runs["busy-core"].busy_loops == 1


def test_dry_run_prints_the_plan_and_runs_nothing():
    result = subprocess.run([sys.executable, str(SCRIPT), "--dry-run", "--python", sys.executable],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "1. baseline" in result.stdout and "--keep-going" in result.stdout
    assert "LESSONLIB_PERTURB=subnormals" in result.stdout


def test_the_report_names_each_failed_assert_and_counts_changed_numbers():
    page = "docs/lessons/transformer.md"
    out = f"--- {page}:10 (exec)\naccuracy 0.912 after 40 steps\n--- {page}:20 `{{py}} acc:.2f` = 0.91\n"
    base = robustness.Run("baseline", "as built", stdout=out, exit_code=0)
    other = robustness.Run("cpu-default", "other kernels", stdout=out.replace("0.912", "0.95"), exit_code=1,
                           stderr=f"{page}:30: 1 assert failed\n{page}:30: both heads take the key\n")
    text, ok = robustness.report([base, other], [page], "a test")
    assert not ok
    assert f"| {page} | 0 | 1 / 1 of 3 |" in text
    assert "- line 30: both heads take the key" in text and f"{page}:10: 0.912 -> 0.95" in text
    assert robustness.report([base], [page], "a test")[1] is True
