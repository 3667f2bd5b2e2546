"""The recurrence lesson's measured figures (lessonlib.figures.recurrence_plots) draw the numbers
they are given, in each model's colour: one line per layer for the state kept and for recall, one
dot per model for bits per character."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from lessonlib.figures import recurrence_plots  # noqa: E402
from lessonlib.figures.plots import PALETTE  # noqa: E402


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def test_state_plot_draws_a_line_per_layer_on_log_axes():
    tokens = [1, 10, 100]
    fig = recurrence_plots.state_plot(tokens, {"state": ("linear_attention", [64, 64, 64]),
                                               "cache": ("softmax_attention", [16, 160, 1600])})
    (ax,) = fig.axes
    lines = {line.get_label(): (list(line.get_xdata()), list(line.get_ydata())) for line in ax.get_lines()}
    assert lines == {"state": (tokens, [64, 64, 64]), "cache": (tokens, [16, 160, 1600])}
    assert ax.get_xscale() == ax.get_yscale() == "log"


def test_bits_plot_puts_each_model_at_its_value_first_on_top():
    bits = {"a": ("rnn", 2.8), "b": ("lstm", 3.0), "c": ("min_gru", 3.6)}
    fig = recurrence_plots.bits_plot(bits, (2.8, 3.0), "a to b", {"bigram": 3.8})
    (ax,) = fig.axes
    dots = [line for line in ax.get_lines() if line.get_marker() == "o"]
    assert [(d.get_xdata()[0], d.get_ydata()[0]) for d in dots] == [(2.8, 2), (3.0, 1), (3.6, 0)]
    assert {t.get_text(): y for t, y in zip(ax.get_yticklabels(), ax.get_yticks())} == {"a": 2, "b": 1, "c": 0}
    texts = {t.get_text() for t in ax.texts}
    assert {"2.80", "3.00", "3.60", "a to b", "bigram"} <= texts
    assert [d.get_color() for d in dots] == [PALETTE["blue"], PALETTE["orange"], PALETTE["green"]]
    low, high = ax.get_xlim()
    assert low < 2.8 and high > 3.8


def test_recall_plot_draws_a_line_per_layer_and_chance():
    ns = (4, 8, 16)
    fig = recurrence_plots.recall_plot(ns, {"a": ("linear_attention", [1.0, 0.9, 0.5]),
                                            "b": ("softmax_attention", [1.0, 1.0, 0.9])}, key_size=8)
    (ax,) = fig.axes
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert list(lines["a"].get_ydata()) == [1.0, 0.9, 0.5] and list(lines["b"].get_ydata()) == [1.0, 1.0, 0.9]
    assert lines["a"].get_color() == PALETTE["sky"] and lines["b"].get_color() == PALETTE["vermillion"]
    assert list(lines["chance, 1 / n"].get_ydata()) == [1 / n for n in ns]
