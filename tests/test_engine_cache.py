"""The page cache: what runs again, what does not, and what survives damage."""
from __future__ import annotations

from pathlib import Path

import pytest

from lessonlib.engine import cache as cache_module
from lessonlib.engine.page import Settings, execute_page

PATH = "docs/fixture.md"


def page_with_side_effect(log: Path, prose: str = "Some prose.", extra: str = "") -> str:
    return (
        f"# Title\n\n{prose}\n\n"
        f"```python exec\nwith open({str(log)!r}, 'a') as f:\n    f.write('ran\\n')\nanswer = 42{extra}\n```\n\n"
        "The answer is `{py} answer`.\n"
    )


def runs(log: Path) -> int:
    return log.read_text().count("ran") if log.exists() else 0


@pytest.fixture
def settings(tmp_path) -> Settings:
    return Settings(cache_dir=tmp_path / "cache")


def test_no_change_and_prose_edits_run_nothing_code_edits_run_again(tmp_path, settings):
    log = tmp_path / "log"
    first = execute_page(page_with_side_effect(log), PATH, settings)
    assert (runs(log), first.from_cache, first.blocks_run) == (1, False, 1)

    again = execute_page(page_with_side_effect(log), PATH, settings)
    assert (runs(log), again.from_cache, again.blocks_run) == (1, True, 0)
    assert again.markdown == first.markdown

    edited = execute_page(page_with_side_effect(log, prose="Different words, same code."), PATH, settings)
    assert runs(log) == 1 and edited.from_cache
    assert "Different words, same code." in edited.markdown and "The answer is 42." in edited.markdown

    execute_page(page_with_side_effect(log, extra=" + 0"), PATH, settings)
    assert runs(log) == 2


def test_refresh_forces_a_run(tmp_path, settings):
    log = tmp_path / "log"
    execute_page(page_with_side_effect(log), PATH, settings)
    execute_page(page_with_side_effect(log), PATH, Settings(cache_dir=settings.cache_dir, refresh=True))
    assert runs(log) == 2


def test_a_change_in_a_lessonlib_module_the_page_imports_invalidates_it_and_only_it(tmp_path, settings, monkeypatch):
    source = tmp_path / "lessonlib"
    (source / "engine").mkdir(parents=True)
    (source / "__init__.py").write_text("")
    (source / "model.py").write_text("from lessonlib.helpers import twice\n")
    (source / "helpers.py").write_text("def twice(x):\n    return 2 * x\n")
    (source / "unrelated.py").write_text("x = 1\n")
    monkeypatch.setattr(cache_module, "SOURCE_ROOT", source)
    log = tmp_path / "log"
    # The import is only read, never executed: the key follows the page's lessonlib imports.
    uses_model = "\n\ndef _uses():\n    from lessonlib import model"
    execute_page(page_with_side_effect(log, extra=uses_model), PATH, settings)
    (source / "unrelated.py").write_text("x = 2\n")
    execute_page(page_with_side_effect(log, extra=uses_model), PATH, settings)
    assert runs(log) == 1
    (source / "helpers.py").write_text("def twice(x):\n    return x + x\n")
    execute_page(page_with_side_effect(log, extra=uses_model), PATH, settings)
    assert runs(log) == 2, "a module imported through another one counts too"
    (source / "engine" / "session.py").write_text("# changed\n")
    execute_page(page_with_side_effect(log, extra=uses_model), PATH, settings)
    assert runs(log) == 3, "the engine's own sources count for every page"


def test_a_changed_pinned_version_invalidates(tmp_path, settings, monkeypatch):
    log = tmp_path / "log"
    execute_page(page_with_side_effect(log), PATH, settings)
    real_version = cache_module.version
    monkeypatch.setattr(cache_module, "version", lambda name: "0.0.1" if name == "torch" else real_version(name))
    execute_page(page_with_side_effect(log), PATH, settings)
    assert runs(log) == 2


def test_failed_runs_are_not_cached(tmp_path, settings):
    log = tmp_path / "log"
    bad = page_with_side_effect(log) + "\n```python exec\nassert answer == 0\n```\n"
    for _ in range(2):
        with pytest.raises(Exception):
            execute_page(bad, PATH, settings)
    assert runs(log) == 2
    assert not list((settings.cache_dir / "pages").glob("*.json"))


@pytest.mark.parametrize("damage", ["truncate", "garble", "tamper"])
def test_a_damaged_entry_is_detected_and_the_page_rerun(tmp_path, settings, damage):
    log = tmp_path / "log"
    first = execute_page(page_with_side_effect(log), PATH, settings)
    (entry,) = (settings.cache_dir / "pages").glob("*.json")
    text = entry.read_text()
    entry.write_text(
        {"truncate": text[: len(text) // 2], "garble": "\x00not json", "tamper": text.replace("ran", "RAN").replace("42", "41")}[
            damage
        ]
    )
    again = execute_page(page_with_side_effect(log), PATH, settings)
    assert runs(log) == 2 and not again.from_cache
    assert again.markdown == first.markdown
    assert execute_page(page_with_side_effect(log), PATH, settings).from_cache


def test_memoized_experiments_do_not_rerun_when_a_later_block_changes(tmp_path, settings, monkeypatch):
    module = tmp_path / "slow_experiment.py"
    module.write_text(
        "import lessonlib\n\n@lessonlib.memo\ndef train(steps, log):\n"
        "    with open(log, 'a') as f:\n        f.write('ran\\n')\n    return steps * 2\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    log = tmp_path / "log"

    def page(later: str) -> str:
        return f"```python exec\nfrom slow_experiment import train\nresult = train(10, {str(log)!r})\n```\n\n```python exec\n{later}\n```\n"

    execute_page(page("print(result)"), PATH, settings)
    execute_page(page("print(result + 1)"), PATH, settings)
    assert runs(log) == 1
    execute_page(page("print(result + 2)"), PATH, Settings(cache_dir=settings.cache_dir, refresh=True))
    assert runs(log) == 2, "a forced refresh reruns memoized experiments too"


def test_editing_a_lessonlib_function_reruns_the_page_and_changes_its_figure(tmp_path, settings):
    """End to end with a real module inside the lessonlib package (removed afterwards)."""
    import importlib
    import uuid

    name = f"_probe_{uuid.uuid4().hex[:8]}"
    module = cache_module.SOURCE_ROOT / f"{name}.py"
    page = (
        f'```python exec caption="A line drawn by lessonlib.{name}."\n'
        f"import importlib\nimport lessonlib.{name} as probe\nimportlib.reload(probe)\nprobe.draw()\n```\n"
    )
    draw = "import matplotlib.pyplot as plt\n\ndef draw():\n    plt.plot([0, 1], [0, {slope}])\n"
    try:
        module.write_text(draw.format(slope=1))
        importlib.invalidate_caches()
        first = execute_page(page, PATH, settings)
        assert execute_page(page, PATH, settings).from_cache
        module.write_text(draw.format(slope=2))
        second = execute_page(page, PATH, settings)
        assert not second.from_cache and second.blocks_run == 1
        assert first.outputs[0][0].figures[0].svg != second.outputs[0][0].figures[0].svg
    finally:
        module.unlink(missing_ok=True)
