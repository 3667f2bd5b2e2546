"""Claims bound to checks: which sentences count as claims, how a check quotes one, what
`lessonlib check` says, and how the page's checks list shows each sentence above its check."""
from __future__ import annotations

import pytest

from lessonlib.__main__ import main as cli_main
from lessonlib.engine.builder.claims import binding, sentences
from lessonlib.engine.builder.render import checks_appendix
from lessonlib.engine.worker.blocks import parse_page
from lessonlib.engine.worker.claims import claim


@pytest.mark.parametrize(("sentence", "is_claim"), [
    ("The LSTM learns the task in fewer steps than the RNN.", True),
    ("The transformer is cheaper per step.", True),
    ("Training never diverged.", True),
    ("The gate stays open because its bias starts at one.", True),
    ("Without the mask the model fails to generate.", True),
    ("For language this is fatal.", True),
    ("Here is the model, one step at a time.", False),
    ("Every position asks a question.", False),
    ("Run the cell below.", False),
])
def test_the_word_list_flags_comparisons_generalisations_and_causes_not_every_sentence(sentence, is_claim):
    (found,) = sentences(sentence + "\n")
    assert found.claim_like is is_claim


PAGE = """\
# Title

The open gate solves the task. It learns faster than the RNN,
at every length we tried. The learning rate is `{py} lr`.

A plain sentence. This one is slower than it looks. <!-- not a claim: a joke -->

| a table | of two cells |
| --- | --- |
| a | b |

```python exec check
ok = True
assert ok, claim("solves the task")
x = 1
assert x == 1, claim("faster than the RNN, at every length")
```
"""


def test_sentences_keep_their_lines_and_a_comment_marks_the_sentence_before_it_as_not_a_claim():
    found = {s.text: s for s in sentences(PAGE)}
    assert found["It learns faster than the RNN, at every length we tried."].line == 3
    assert found["The learning rate is `{py} lr`."].line == 4
    assert found["This one is slower than it looks."].marked
    assert not found["A plain sentence."].marked
    assert "of two cells" in found  # a table's cells are prose too


def test_binding_counts_flagged_bound_and_marked_and_names_a_phrase_the_prose_lost():
    page = parse_page(PAGE, "docs/p.md")
    found = binding(page, PAGE)
    assert (found.flagged, found.bound, found.marked, found.wrong, found.unbound) == (3, 2, 1, [], [])

    edited = PAGE.replace("gate solves the task", "gate solves it")
    found = binding(parse_page(edited, "docs/p.md"), edited)
    assert found.problems()[1] == (14, "the check quotes 'solves the task', which the prose no longer says")
    assert [s.text for s in found.unbound] == ["The open gate solves it."]


def test_claim_is_the_message_of_the_assert_that_checks_the_sentence():
    with pytest.raises(AssertionError, match="the claim 'never diverged' does not hold: loss 3.2"):
        assert 3.2 < 1, claim("never diverged", "loss 3.2")


def test_the_checks_list_shows_each_sentence_with_its_values_above_the_code_that_checks_it():
    page = parse_page(PAGE.replace("`{py} lr`", "`{py} lr`, faster than `{py} lr * 2`"), "docs/p.md")
    appendix = checks_appendix(page, {"lr": "0.1", "lr * 2": "0.2"})
    first, second = appendix.index("> The open gate solves the task."), appendix.index("> It learns faster")
    assert first < appendix.index('claim("solves the task")') < second < appendix.index("x = 1")
    assert appendix.index("ok = True") < appendix.index('claim("solves the task")')


def test_lessonlib_check_fails_on_an_unbound_claim_and_passes_once_it_is_bound_or_marked(tmp_path, capsys):
    page = tmp_path / "p.md"
    page.write_text(PAGE + "\nThis matters because of the gate.\n")
    assert cli_main(["check", str(page)]) == 1
    assert f"{page.as_posix()}:19: a claim no check quotes: 'This matters because of the gate.'" in capsys.readouterr().out

    page.write_text(PAGE + "\nThis matters because of the gate. <!-- not a claim -->\n")
    assert cli_main(["check", str(page)]) == 0
    assert "4 claim-like sentences: 2 quoted by a check, 2 marked not a claim, 0 neither" in capsys.readouterr().err


@pytest.mark.parametrize(("where", "line"), [
    ("| model | result |\n| --- | --- |\n| LSTM | learns faster than the RNN |\n", 5),
    ('<div class="summary">\n<p>The LSTM learns <b>faster</b> than the RNN.</p>\n</div>\n', 4),
    ('```python exec hide-code caption="The LSTM learns faster than the RNN."\nx = 1\n```\n', 3),
    ('```python exec hide-code alt="The LSTM learns faster than the RNN."\nx = 1\n```\n', 3),
    ('??? question "Which learns first?"\n\n    The LSTM: it learns faster than the RNN.\n', 5),
])
def test_table_cells_html_blocks_captions_alt_texts_and_answers_are_read_as_prose(where, line):
    page = "# Title\n\n" + where
    (found,) = [s for s in sentences(page) if s.claim_like]
    assert "faster than the RNN" in found.text and found.line == line
    bound = page + '\n```python exec check\nassert True, claim("faster than the RNN")\n```\n'
    assert binding(parse_page(bound, "docs/p.md"), bound).problems() == []


@pytest.mark.parametrize(("phrase", "problem"), [
    ("", "a phrase of at least 3 words is needed"),
    ("   ", "a phrase of at least 3 words is needed"),
    ("solves", "a phrase of at least 3 words is needed"),
    ("the task", "a phrase of at least 3 words is needed"),
    ("than the RNN", "which is in 2 sentences: line 3: 'It learns faster than the RNN, at every length we tried.'; "
                     "line 19: 'The GRU is no slower than the RNN.'"),
])
def test_a_phrase_too_short_to_name_one_sentence_fails_at_its_line(phrase, problem):
    page = PAGE + "\nThe GRU is no slower than the RNN.\n" + f'\n```python exec check\nassert True, claim("{phrase}")\n```\n'
    line = page.count("\n") - 1
    (found,) = [p for p in binding(parse_page(page, "docs/p.md"), page).problems() if p[0] == line]
    assert problem in found[1]


@pytest.mark.parametrize("code", [
    'if False:\n    assert True, claim("solves the task")',
    'def later():\n    assert True, claim("solves the task")',
    'check = lambda: claim("solves the task")',
    'message = claim("solves the task")',
    'while False:\n    assert True, claim("solves the task")',
    'try:\n    pass\nexcept ValueError:\n    assert True, claim("solves the task")',
])
def test_a_claim_in_code_that_may_never_run_binds_nothing(code):
    page = PAGE.replace('assert ok, claim("solves the task")', code)
    found = binding(parse_page(page, "docs/p.md"), page)
    assert "The open gate solves the task." in [s.text for s in found.unbound]
    if "assert" in code:
        assert any("where it may never run" in why for _, why in found.wrong)


def test_a_claim_in_a_for_loop_or_a_with_block_binds():
    for code in ('for x in (1, 2):\n    assert x, claim("solves the task")',
                 'with open(__file__):\n    assert ok, claim("solves the task")'):
        page = PAGE.replace('assert ok, claim("solves the task")', code)
        assert binding(parse_page(page, "docs/p.md"), page).problems() == []


def test_lessonlib_check_refuses_a_silencing_phrase_at_its_line(tmp_path, capsys):
    page = tmp_path / "p.md"
    page.write_text(PAGE.replace('claim("solves the task")', 'claim("")'))
    assert cli_main(["check", str(page)]) == 1
    out = capsys.readouterr().out
    assert f"{page.as_posix()}:14: the check quotes '': a phrase of at least 3 words" in out
    assert "a claim no check quotes: 'The open gate solves the task.'" in out


def test_the_checks_list_quotes_a_figures_text_as_the_figure_shows_it():
    from lessonlib.engine.worker.outputs import BlockOutput, Figure

    text = ('# T\n\n```python exec alt="The loss of {k} falls faster than {m}."\nk, m = 4, 64\n```\n\n'
            '```python exec check\nassert True, claim("falls faster than")\n```\n')
    page = parse_page(text, "docs/p.md")
    outputs = [BlockOutput(figures=[Figure("<svg/>", "The loss of 4 falls faster than 64.")]), BlockOutput()]
    appendix = checks_appendix(page, {}, outputs)
    assert "> The loss of 4 falls faster than 64." in appendix and "{k}" not in appendix
    assert "> The loss of &#123;k&#125; falls" in checks_appendix(page, {})  # before it has run: as written
