"""The house rules (every number in prose comes from code, every claim is bound to its check) are
a site's choice: the pytest door adds their two items only to the pages the lessonlib option
`checked_pages` names (glob patterns, relative to docs/), none by default. A folder's name alone
(docs/lessons/) adds nothing. Each case collects a small site's pages with pytester, in process;
nothing runs a page."""
from __future__ import annotations

import mkdocs.config.defaults  # noqa: F401  (MkDocs once, here: pytester's inner runs drop the modules they import,
import mkdocs.theme  # noqa: F401  and MkDocs' YAML loader breaks when imported a second time)
import pytest
from fixture_sites import GOOD, MKDOCS_YML, make_site

from lessonlib.engine.config import Settings, load_settings
from lessonlib.engine.worker.errors import SetupError

pytest_plugins = ["pytester"]

HOUSE_RULES = ("numbers-come-from-code", "claims-are-checked")
PAGES = {"lessons/x.md": GOOD, "chapters/y.md": GOOD, "z.md": GOOD}


def collected(pytester, option: str | None) -> dict[str, set[str]]:
    """Each collected page's item names, for a site with `option` (a line of the lessonlib plugin)."""
    site = make_site(pytester.path, PAGES)
    if option is not None:
        (site / "mkdocs.yml").write_text(MKDOCS_YML.replace("      timeout: 60\n", f"      timeout: 60\n      {option}\n"))
    pytester.makeini("[pytest]\n")  # the site is the rootdir
    result = pytester.runpytest_inprocess("-p", "lessonlib.engine.builder.pytest_plugin", "-p", "no:cacheprovider",
                                          "--collect-only", "-q", "docs")
    assert result.ret == 0, result.stdout.str()
    items: dict[str, set[str]] = {}
    for line in result.stdout.lines:
        if "::" in line:
            page, name = line.split("::")
            items.setdefault(page, set()).add(name)
    return items


def test_a_site_without_the_option_gets_no_house_rules_not_even_under_docs_lessons(pytester):
    assert collected(pytester, None) == {f"docs/{page}": {"executes"} for page in PAGES}


def test_the_pages_the_option_names_get_both_house_rules_and_no_others(pytester):
    items = collected(pytester, 'checked_pages: ["lessons/*"]')
    assert items == {"docs/lessons/x.md": {"executes", *HOUSE_RULES}, "docs/chapters/y.md": {"executes"},
                     "docs/z.md": {"executes"}}


def test_a_folder_named_lessons_is_not_the_rule_the_patterns_are(pytester):
    items = collected(pytester, 'checked_pages: ["chapters/*", "z.md"]')
    assert items == {"docs/lessons/x.md": {"executes"}, "docs/chapters/y.md": {"executes", *HOUSE_RULES},
                     "docs/z.md": {"executes", *HOUSE_RULES}}


BAD = {
    "checked_pages: lessons/*": "lessons/*",  # a pattern, not a list of them
    "checked_pages: [3]": "3",
    "checked_pages: [lessons/*, {page: x}]": "{'page': 'x'}",
}


@pytest.mark.parametrize("option", BAD)
def test_a_bad_value_is_one_line_naming_the_option(tmp_path, option):
    site = make_site(tmp_path, {"lessons/x.md": GOOD})
    (site / "mkdocs.yml").write_text(MKDOCS_YML.replace("      timeout: 60\n", f"      {option}\n"))
    with pytest.raises(SetupError) as info:
        load_settings(site / "mkdocs.yml")
    message = str(info.value)
    assert "\n" not in message and message.startswith("mkdocs.yml, lessonlib option checked_pages: "), message
    assert BAD[option] in message, message


def test_a_bad_value_stops_the_build_and_the_cli_in_the_same_line(tmp_path, build, lessonlib_cli):
    site = make_site(tmp_path, {"index.md": "# Home\n", "lessons/x.md": GOOD})
    (site / "mkdocs.yml").write_text(MKDOCS_YML.replace("      timeout: 60\n", "      checked_pages: lessons/*\n"))
    line = "mkdocs.yml, lessonlib option checked_pages: 'lessons/*' is not a list of glob patterns"
    for result in (build(site), lessonlib_cli(site, "run", "docs/index.md")):
        assert result.returncode != 0 and line in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert not (site / ".cache").exists()  # no page ran


@pytest.mark.parametrize("value", ["lessons/*", ("lessons/*", 3), [None]])
def test_settings_refuse_anything_but_a_list_of_patterns(value):
    with pytest.raises(SetupError, match=r"^checked_pages: "):
        Settings(checked_pages=value)
    assert Settings(checked_pages=["lessons/*"]).checked_pages == ("lessons/*",)
    assert Settings().checked_pages == ()


@pytest.mark.parametrize(("line", "said"), [
    ("checked_pages: [3]", "mkdocs.yml, lessonlib option checked_pages: 3 "),
    ("checked_pagez: [x]", "mkdocs.yml: Aborted with 1 configuration warnings in 'strict' mode"),  # MkDocs' own refusal
], ids=["bad value", "misspelt option"])
def test_a_bad_setting_stops_the_pytest_door_in_one_line_before_any_page_runs(pytester, line, said):
    site = make_site(pytester.path, {"lessons/x.md": GOOD})
    (site / "mkdocs.yml").write_text(MKDOCS_YML.replace("      timeout: 60\n", f"      {line}\n"))
    pytester.makeini("[pytest]\n")
    result = pytester.runpytest_inprocess("-p", "lessonlib.engine.builder.pytest_plugin", "-p", "no:cacheprovider",
                                          "docs")
    output = result.stdout.str()
    assert result.ret != 0 and "Traceback" not in output and "INTERNALERROR" not in output, output
    assert said in output, output
    assert "passed" not in output and "failed" not in output, output
