"""A block's output is what it wrote during the block, at the Python and the descriptor level
(lessonlib.engine.worker.capture): in order, under the output limit, and never another block's."""
from __future__ import annotations

import textwrap

import pytest

from lessonlib.engine.builder.page import execute_page
from lessonlib.engine.config import Settings
from lessonlib.engine.worker.errors import LessonError

PATH = "docs/fixture.md"


def run(text: str, **settings):
    return execute_page(textwrap.dedent(text), PATH, Settings(**settings))


def outputs(text: str, **settings) -> list[str]:
    return [o.text for o in run(text, **settings).outputs.blocks]


def test_descriptor_level_output_lands_on_its_block_in_order():
    texts = outputs("""\
        ```python exec
        import os, subprocess, sys
        print("one")
        os.write(1, b"two\\n")
        subprocess.run([sys.executable, "-c", "print('three')"], check=True)
        print("four", file=sys.stderr)
        os.system("echo five")
        os.write(2, b"six\\n")
        ```

        ```python exec
        print("seven")
        ```
        """)
    assert texts == ["one\ntwo\nthree\nfour\nfive\nsix\n", "seven\n"]


def test_descriptor_level_output_over_the_limit_fails_at_the_statement_that_wrote_it(capfd):
    page = """\
        ```python exec
        import os
        os.write(1, b"x" * 3_000_000)
        ```
        """
    with pytest.raises(LessonError) as info:
        run(page, output_limit_kb=1)
    assert str(info.value).startswith(f"{PATH}:3: this block's output is larger than the limit of 1 KB")
    assert len(capfd.readouterr().err) < 10_000, "the build's log never sees a block's output"


WRITERS = {  # the statement that takes the block over 1 KB, at line 8; what came before stays under it
    "os.write(2, ...)": "os.write(2, b'x' * 2000)",
    "sys.stdout.buffer": "sys.stdout.buffer.write(b'x' * 2000)",
    "sys.stderr.write": "sys.stderr.write('x' * 2000)",
    "print in a function": "shout(2000)",  # named at the function's line that wrote
    "a thread, joined": "t = threading.Thread(target=shout, args=(2000,)); t.start(); t.join()",
    "logging": "logging.getLogger('page').warning('x' * 2000)",
}


@pytest.mark.parametrize("writer", WRITERS)
def test_output_over_the_limit_fails_at_the_line_that_took_it_over(writer):
    page = f"""\
        ```python exec
        import logging, os, sys, threading

        def shout(n):
            print("x" * n)

        os.write(1, b"under the limit " * 20)
        {WRITERS[writer]}
        print("more, past the limit")
        ```
        """
    with pytest.raises(LessonError) as info:
        run(page, output_limit_kb=1)
    line = 5 if writer in ("print in a function", "a thread, joined") else 8
    assert str(info.value).startswith(f"{PATH}:{line}: this block's output is larger than the limit of 1 KB"), (
        str(info.value))


def test_output_over_the_limit_from_another_process_fails_at_the_block():
    page = """\
        ```python exec
        import subprocess, sys
        print("under the limit")
        subprocess.run([sys.executable, "-c", "print('x' * 3000)"], check=True)
        print("more, past the limit")
        ```
        """
    with pytest.raises(LessonError) as info:
        run(page, output_limit_kb=1)
    assert str(info.value).startswith(f"{PATH}:1: this block's output is larger than the limit of 1 KB")


def test_bytes_written_through_sys_stdout_buffer_are_the_blocks_output():
    assert outputs("""\
        ```python exec
        import sys
        print("text", flush=True)
        sys.stdout.buffer.write("bytes \\u00e9\\n".encode())
        sys.stdout.buffer.flush()
        print("text again")
        ```
        """) == ["text\nbytes \u00e9\ntext again\n"]


@pytest.mark.never_reused  # concurrency: one passing run vouches for no other
def test_a_thread_that_writes_after_its_block_fails_the_page_at_that_block():
    page = """\
        # A page

        ```python exec
        import threading

        wrote = threading.Event()

        def tick():
            while True:
                try:
                    print("tick")
                finally:
                    wrote.set()

        threading.Thread(target=tick, daemon=True).start()
        ```

        ```python exec
        wrote.clear()
        wrote.wait()  # the thread has written since this block started: after the block above ended
        ```
        """
    with pytest.raises(LessonError) as info:
        run(page)
    assert str(info.value).startswith(f"{PATH}:3: a thread this block started wrote after the block ended")


def test_a_thread_joined_in_its_block_is_that_blocks_output():
    texts = outputs("""\
        ```python exec
        import threading
        thread = threading.Thread(target=lambda: print("from the thread"))
        thread.start()
        thread.join()
        ```

        ```python exec
        print("next")
        ```
        """)
    assert texts == ["from the thread\n", "next\n"]


def test_a_memoized_calls_descriptor_level_output_is_shown_again_on_a_hit(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    log = tmp_path.parent / f"{tmp_path.name}.log"
    (docs / "noisy.py").write_text(textwrap.dedent(f"""\
        import subprocess, sys

        LOG = {str(log)!r}  # outside the project: a page writes there only into its scratch folder


        def call(n):
            with open(LOG, "a") as f:
                f.write("ran\\n")
            print("python", n)
            subprocess.run([sys.executable, "-c", "print('child')"], check=True)
            return n + 1
        """))
    settings = Settings(root=tmp_path, cache_dir=tmp_path / "cache")
    page = '```python exec\nimport noisy\n```\n\n```python exec memo="noisy.call"\nprint(noisy.call(1))\n```\n'
    first = execute_page(page, PATH, settings)
    second = execute_page(page.replace("import noisy", "import noisy  # an edit: the page runs again"), PATH, settings)
    assert log.read_text() == "ran\n", "the second run found the call in the cache"
    assert [b.text for b in first.outputs.blocks] == [b.text for b in second.outputs.blocks] == [
        "", "python 1\nchild\n2\n"]
