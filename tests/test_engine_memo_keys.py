"""A memoized call is keyed on what its callable carries, not only on its code: a bound self, the
closure's cells, the defaults, a functools.partial's arguments. One it cannot fingerprint is
refused, in words. The key's part for the callable is callable_fingerprint, tested here in process
on every carrier; one carrier through a page's memoized call shows that the memo keys on it."""
from __future__ import annotations

import types

import pytest

from lessonlib.engine.builder.page import execute_page
from lessonlib.engine.config import Settings
from lessonlib.engine.worker.errors import LessonError
from lessonlib.engine.worker.fingerprint import callable_fingerprint

CARRIERS = {
    "a bound self": """\
class Scale:
    def __init__(self, k):
        self.k = k

    def apply(self, x):
        return x * self.k

call = lessonlib.memo(Scale(K).apply)""",
    "a closure": """\
def make(k):
    def apply(x):
        return x * k
    return apply

call = lessonlib.memo(make(K))""",
    "a default": """\
def apply(x, k=K):
    return x * k

call = lessonlib.memo(apply)""",
    "a partial's argument": """\
import functools

def apply(k, x):
    return x * k

call = lessonlib.memo(functools.partial(apply, K))""",
}


@pytest.mark.parametrize("carrier", CARRIERS)
def test_a_callables_fingerprint_follows_what_it_carries(carrier):
    def fingerprint(k: int) -> str:
        namespace = {"__name__": "__main__", "lessonlib": types.SimpleNamespace(memo=lambda f: f), "K": k}
        exec(compile(CARRIERS[carrier], "docs/p.md", "exec"), namespace)  # as a page's block defines it
        return callable_fingerprint(namespace["call"])

    three, four = fingerprint(3), fingerprint(4)
    assert three != four and fingerprint(3) == three


def test_a_memoized_call_is_keyed_on_what_its_callable_carries(tmp_path):
    carrier = "a closure"
    (tmp_path / "docs").mkdir()
    settings = Settings(root=tmp_path, cache_dir=tmp_path / "cache")

    def result(k: int) -> str:
        page = f"```python exec\nimport lessonlib\nK = {k}\n{CARRIERS[carrier]}\nprint(call(2))\n```\n"
        return execute_page(page, "docs/p.md", settings).outputs.blocks[0].text

    assert [result(3), result(4), result(3)] == ["6\n", "8\n", "6\n"]


def test_a_callable_that_cannot_be_fingerprinted_is_refused_in_words(tmp_path):
    (tmp_path / "docs").mkdir()
    page = ("```python exec\nimport lessonlib, threading\n\ndef make():\n    lock = threading.Lock()\n"
            "    def work(x):\n        with lock:\n            return x\n    return work\n\n"
            "print(lessonlib.memo(make())(1))\n```\n")
    with pytest.raises(LessonError) as info:
        execute_page(page, "docs/p.md", Settings(root=tmp_path, cache_dir=tmp_path / "cache"))
    assert info.value.line == 11
    assert "lessonlib.memo cannot fingerprint make.<locals>.work: its closure" in info.value.message
    assert "cannot pickle '_thread.lock' object" in info.value.message
