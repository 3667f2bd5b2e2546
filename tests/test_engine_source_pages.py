"""The code behind the lessons on the site (lessonlib.engine.builder.source_pages): in process."""
from __future__ import annotations

import functools
import re
import sys
import types

from site_support import indexed_text

from lessonlib.engine.builder import source_pages
from lessonlib.engine.worker.outputs import Reference
from lessonlib.engine.worker.shown import defined_at


def test_a_package_is_found_by_its_files_without_importing_it(tmp_path, monkeypatch):
    package = tmp_path / "needs_torch"
    (package / "models").mkdir(parents=True)
    (package / "__init__.py").write_text('"""A package."""\nimport no_such_module_anywhere\n')
    (package / "models" / "__init__.py").write_text("")
    (package / "models" / "rnn.py").write_text("import no_such_module_anywhere\n")
    (package / "models" / "__pycache__").mkdir()
    (package / "models" / "__pycache__" / "rnn.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    found = source_pages.module_files("needs_torch")
    assert [name for name, _ in found] == ["needs_torch", "needs_torch.models", "needs_torch.models.rnn"]
    assert source_pages.module_files("needs_torch.models.rnn") == [("needs_torch.models.rnn", found[2][1])]
    assert "needs_torch" not in sys.modules


def test_a_module_page_anchors_every_line_and_lists_what_it_defines(tmp_path):
    file = tmp_path / "cost.py"
    file.write_text('"""Counting cost. Second sentence.\n\nMore."""\nimport functools\n\n\n'
                    "@functools.cache\ndef count(fn):\n    '''Steps and <operations>.'''\n    return 1\n\n\n"
                    "class Cost:\n    def total(self):\n        return 2\n")
    page = source_pages.source_page("lessonlib.experiments.cost", file)
    assert page.src_uri == "code/lessonlib/experiments/cost.md" and page.file == "lessonlib/experiments/cost.py"
    assert page.summary == "Counting cost. Second sentence."
    assert all(f'id="L-{n}"' in page.markdown for n in range(1, 16))
    assert '<a href="#L-7">count</a> (function)' in page.markdown  # its decorator's line
    assert "Steps and &lt;operations&gt;." in page.markdown
    assert '<a href="#L-13">Cost.total</a>' not in page.markdown
    assert '<a href="#L-14">Cost.total</a>' in page.markdown
    assert "in the repository" not in page.markdown
    linked = source_pages.source_page("lessonlib.experiments.cost", file, "https://github.com/o/r/", "dev")
    assert "(https://github.com/o/r/blob/dev/lessonlib/experiments/cost.py)" in linked.markdown


def test_a_packages_own_module_is_its_init_file(tmp_path):
    (tmp_path / "__init__.py").write_text("x = 1\n")
    page = source_pages.source_page("lessonlib.models", tmp_path / "__init__.py")
    assert page.file == "lessonlib/models/__init__.py" and page.src_uri == "code/lessonlib/models/__init__.md"


def test_a_source_label_links_to_its_lines_when_its_file_has_a_page():
    html = ('<span class="filename">lessonlib/x.py, line 40</span>'
            '<span class="filename">other/y.py, line 3</span><span class="filename">Output</span>')
    pages = {"lessonlib/x.py": "../../code/lessonlib/x/"}
    linked = source_pages.link_labels(html, lambda name, line: f"{pages[name]}#L-{line}" if name in pages else None)
    assert linked == ('<span class="filename"><a href="../../code/lessonlib/x/#L-40">lessonlib/x.py, line 40</a></span>'
                      '<span class="filename">other/y.py, line 3</span><span class="filename">Output</span>')


def test_a_memoized_name_links_where_the_code_calls_it_and_nowhere_else():
    html = ('<span class="n">lm</span><span class="o">.</span><span class="n">train_all</span>'
            '<span class="nf">train_all</span><span class="n">train_all_2</span><span class="s2">"train_all"</span>')
    linked = source_pages.link_names(html, {"train_all": "code/lm/#L-9"})
    assert re.findall(r'<a [^>]*href="([^"]+)"><span class="n">(\w+)</span></a>', linked) == [("code/lm/#L-9", "train_all")]
    assert source_pages.link_names(html, {}) == html


def test_the_functions_a_memo_option_names_are_found_where_they_are_defined():
    module = types.ModuleType("lessonlib.experiments.cost")
    module.count = source_pages.link_names
    wrapped = functools.wraps(source_pages.link_labels)(lambda *a: None)
    names = {"cost": module, "wrapped": wrapped, "number": 3}
    found = defined_at(names, "cost.count wrapped number missing cost.absent")
    # named as the code calls them, placed where they are defined (a wrapper: where its function is)
    assert [(r.name, r.file) for r in found] == [("count", "lessonlib/engine/builder/source_pages.py"),
                                                 ("wrapped", "lessonlib/engine/builder/source_pages.py")]
    assert found[0].line == source_pages.link_names.__code__.co_firstlineno
    assert all(isinstance(r, Reference) for r in found)


def test_search_finds_a_modules_names_and_summaries_but_not_each_line(tmp_path):
    import markdown

    file = tmp_path / "cost.py"
    file.write_text('"""Counting cost."""\ndef count(fn):\n    """Steps and operations."""\n    tally_inside = 1\n')
    indexed = indexed_text(markdown.markdown(source_pages.source_page("lessonlib.experiments.cost", file).markdown))
    assert "count" in indexed and "Steps and operations." in indexed
    assert "tally_inside" not in indexed
