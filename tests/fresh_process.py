"""A determinism claim checked against a run that could really differ: the same work in a new
interpreter, with another hash seed, other memory addresses and none of this process's state
(two runs in one process share all three, so a result that hangs on them still looks stable)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def output_of(script: str) -> str:
    """What `script` prints to stdout, run by `python -c` in the tests folder (so it can import the
    test modules' own helpers)."""
    # another hash seed than this process's: a fixed one here, unless this process was given it
    seed = "1" if os.environ.get("PYTHONHASHSEED") == "0" else "0"
    env = {**os.environ, "PYTHONHASHSEED": seed}
    result = subprocess.run([sys.executable, "-c", script], cwd=TESTS, env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    return result.stdout
