"""A test's recorded pass (tests/conftest.py, verdict_on) counts only on the very inputs it passed on."""
from conftest import find_verdict


def test_a_pass_counts_only_on_its_inputs(tmp_path):
    first = find_verdict(tmp_path, "t::a", [b"site", b"test file"], refresh=False)
    assert not first.known
    first.record()
    assert find_verdict(tmp_path, "t::a", [b"site", b"test file"], refresh=False).known
    assert not find_verdict(tmp_path, "t::a", [b"site", b"test file", b""], refresh=False).known
    assert not find_verdict(tmp_path, "t::a", [b"sitetest file"], refresh=False).known, "inputs are kept apart"
    assert not find_verdict(tmp_path, "t::b", [b"site", b"test file"], refresh=False).known, "another test"
    assert not find_verdict(tmp_path, "t::a", [b"site", b"test file"], refresh=True).known, "LESSONLIB_REFRESH"


def test_a_new_pass_replaces_the_old_one(tmp_path):
    find_verdict(tmp_path, "t::a", [b"old site"], refresh=False).record()
    find_verdict(tmp_path, "t::a", [b"new site"], refresh=False).record()
    assert not find_verdict(tmp_path, "t::a", [b"old site"], refresh=False).known
    assert len(list((tmp_path / "verdicts").rglob("*"))) == 2  # the test's folder and its one pass
