"""`claim`: the message of an assert that backs a sentence of the prose.

    assert (gap >= -0.02).all(), claim("never better than teacher forcing")

Pages call it; the lint that binds each quoted phrase to its sentence runs nothing and lives on
the build side (lessonlib.engine.builder.claims), so that editing the lint re-runs no page.
"""
from __future__ import annotations


def claim(phrase: str, detail: object = "") -> str:
    """The message of the assert that checks the sentence quoting `phrase`:
    ``assert (gap >= -0.02).all(), claim("never better than teacher forcing")``."""
    return f"the claim {phrase!r} does not hold" + (f": {detail}" if detail != "" else "")
