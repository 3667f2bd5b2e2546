"""The recurrence lesson's picture of the Hillis-Steele scan: it draws the schedule scan_parallel
runs (hillis_steele_rounds), so every position ends covering its whole prefix, in ceil(log2 T) rounds."""
import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch  # noqa: E402

from lessonlib.figures import scan_plots  # noqa: E402
from lessonlib.models.scan import hillis_steele_rounds  # noqa: E402


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


@pytest.mark.parametrize("T", [1, 2, 3, 8, 13])
def test_covered_ends_with_every_prefix(T):
    rows = scan_plots.covered(T)
    assert len(rows) == 1 + math.ceil(math.log2(T)) if T > 1 else len(rows) == 1
    assert rows[0] == [(t + 1, t + 1) for t in range(T)]
    assert rows[-1] == [(1, t + 1) for t in range(T)]
    for row in rows:  # each pair stands for a run of consecutive steps ending at its own position
        assert all(last == t + 1 and 1 <= first <= last for t, (first, last) in enumerate(row))


def test_the_picture_draws_the_schedule():
    T = 8
    fig = scan_plots.hillis_steele(T)
    (ax,) = fig.axes
    boxes = [p for p in ax.patches if isinstance(p, FancyBboxPatch)]
    arrows = [p for p in ax.patches if isinstance(p, FancyArrowPatch)]
    rounds = hillis_steele_rounds(T)
    assert len(boxes) == T * (1 + len(rounds))
    assert len(arrows) == sum(len(pairs) for pairs in rounds) + T * len(rounds)  # combines, and each position's own
    labels = [t.get_text() for t in ax.texts]
    assert "1..8" in labels and "5..8" in labels and "round 3\n(d = 4)" in labels
