"""The lesson's drawn-by-code diagrams and shared plots: each returns a figure with the expected
labels and artists, draws the same picture every time, and rejects inputs it cannot draw."""
import io
import json

import fresh_process
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.patches import Circle, FancyArrowPatch, FancyBboxPatch, Rectangle  # noqa: E402

from lessonlib.figures import diagrams, plots  # noqa: E402
from lessonlib.models.transformer import Block  # noqa: E402


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def texts(fig: Figure) -> list[str]:
    return [t.get_text() for ax in fig.axes for t in ax.texts] + [ax.get_title() for ax in fig.axes]


def patches(fig: Figure, kind: type) -> list:
    return [p for ax in fig.axes for p in ax.patches if isinstance(p, kind)]


def svg(fig: Figure) -> str:
    buffer = io.StringIO()
    with matplotlib.rc_context({"svg.hashsalt": "test", "svg.fonttype": "none"}):
        fig.savefig(buffer, format="svg", metadata={"Date": None})
    return buffer.getvalue()


def test_unrolled_rnn_reads_the_words_in_order():
    fig = diagrams.unrolled_rnn(("dog", "bites", "man"))
    words = [t for t in texts(fig) if t in ("dog", "bites", "man")]
    assert words == ["dog", "bites", "man"]
    assert sum(t == "RNN cell" for t in texts(fig)) == 3
    # per step: word -> cell and cell -> h_t; between steps: h_t -> next cell; plus h_0 in and the final state out
    assert len(patches(fig, FancyArrowPatch)) == 3 * 2 + 2 + 2


def test_unrolled_rnn_prints_the_given_states():
    states = [[0.5, -0.25, 0.125], [0.0, 1.0, -1.0]]
    fig = diagrams.unrolled_rnn(("man", "bites"), states=states)
    joined = "\n".join(texts(fig))
    assert "[0.50, \u22120.25, 0.12]" in joined
    assert "[0.00, 1.00, \u22121.00]" in joined
    with pytest.raises(ValueError, match="one state per word"):
        diagrams.unrolled_rnn(("dog", "bites", "man"), states=states)


def test_lstm_cell_has_three_gates_a_candidate_and_the_cell_line():
    fig = diagrams.lstm_cell()
    joined = "\n".join(texts(fig))
    for label in ("forget f", "input i", "output o", "candidate g", "cell line", "$c_{t-1}$", "$c_t$", "$h_t$"):
        assert label in joined, label
    assert len(patches(fig, FancyBboxPatch)) == 5  # four gate boxes and the output tanh
    assert len(patches(fig, Circle)) == 4  # forget multiply, add, input multiply, output multiply


def test_recurrence_vs_attention_connects_causally():
    n = 5
    fig = diagrams.recurrence_vs_attention(n)
    chain, attention = fig.axes
    assert "chain" in chain.get_title() and "attention" in attention.get_title()
    recurrent = [p for p in chain.patches if isinstance(p, FancyArrowPatch)]
    assert len(recurrent) == n + (n - 1)  # x_t -> h_t, and h_t -> h_{t+1}
    assert len(attention.lines) == n * (n + 1) // 2  # output i sees inputs 1..i: no line to the future
    for line in attention.lines:  # every line runs from an input x_j up to an output z_i with j <= i
        (x_in, x_out), _ = line.get_data()
        assert x_in <= x_out
    counted = diagrams.recurrence_vs_attention(n, steps_per_state=8).axes[0]
    assert any("5 states in a row,\n8 sequential steps each" in t.get_text() for t in counted.texts)


def test_summary_table_states_every_verdict_in_words():
    evidence = {("attention", "long-range learning"): "flat over 60 steps"}
    fig = diagrams.summary_table(evidence)
    joined = texts(fig)
    for name in diagrams.SUMMARY_ROWS + diagrams.SUMMARY_COLUMNS:
        assert name in joined
    verdicts = [v for v, _ in diagrams.SUMMARY_VERDICTS.values()]
    assert sorted(t for t in joined if t in ("solved", "partly", "open")) == sorted(verdicts)
    assert "flat over 60 steps" in joined
    assert len(patches(fig, Rectangle)) == len(diagrams.SUMMARY_ROWS) * len(diagrams.SUMMARY_COLUMNS)
    with pytest.raises(KeyError):
        diagrams.summary_table({("attention", "speed"): "fast"})


def test_transformer_block_names_the_blocks_own_layers_in_order():
    block = Block(16, heads=4, d_ff=48)
    assert set(diagrams.BLOCK_PARTS) == {name for name, _ in block.named_children()}
    fig = diagrams.transformer_block(block)
    (ax,) = fig.axes
    at = {t.get_text(): t.get_position()[0] for t in ax.texts}
    for label in (*diagrams.BLOCK_PARTS, "GELU", "16 \u2192 48", "48 \u2192 16", "attention, 4 heads"):
        assert label in at, label
    # drawn in BLOCK_PARTS' order (the lesson checks that forward calls them in it): LayerNorm before
    # attention, LayerNorm before the MLP, the MLP's two maps around the GELU
    assert sorted(diagrams.BLOCK_PARTS, key=at.get) == list(diagrams.BLOCK_PARTS)
    assert diagrams.BLOCK_PARTS == ("norm1", "self_attn", "norm2", "linear1", "linear2")
    assert at["linear1"] < at["GELU"] < at["linear2"]
    assert sum(t.get_text() == "LayerNorm" for t in ax.texts) == 2
    # the stream is only added to: two additions, one after attention, one after the MLP
    adds = sorted(p.center[0] for p in patches(fig, Circle))
    assert len(adds) == 2 and sum(t.get_text() == "+" for t in ax.texts) == 2
    assert at["self_attn"] < adds[0] < at["norm2"] and at["linear2"] < adds[1]
    with pytest.raises(ValueError, match="not a transformer block"):
        diagrams.transformer_block(torch.nn.Linear(4, 4))


def test_qkv_shapes_draws_every_matrix_in_proportion():
    n, d, d_k = 5, 8, 4  # d_k unlike d, so a swapped side shows
    fig = diagrams.qkv_shapes(n, d, d_k)
    boxes = [p for p in patches(fig, Rectangle) if p.get_label().startswith("matrix ")]
    drawn = sorted((p.get_label().removeprefix("matrix "), round(p.get_height() / p.get_width() * 1000))
                   for p in boxes)
    want = {"$X$": (n, d), "$W_q^\\top$": (d, d_k), "$W_k^\\top$": (d, d_k), "$W_v^\\top$": (d, d_k),
            "$Q$": (n, d_k), "$K$": (n, d_k), "$V$": (n, d_k), "$K^\\top$": (d_k, n), "scores": (n, n),
            "weights": (n, n), "output": (n, d_k)}
    names = [name for name, _ in drawn]
    assert set(names) == set(want)
    assert names.count("$X$") == 3 and names.count("$Q$") == 2 and names.count("$V$") == 2
    assert names.count("scores") == 2 and names.count("weights") == 2
    for name, ratio in drawn:  # rows over columns
        rows, cols = want[name]
        assert ratio == round(rows / cols * 1000), name
    # one scale for all: a box's width is its columns times the same cell size
    cell = {round(p.get_width() / want[p.get_label().removeprefix("matrix ")][1], 9) for p in boxes}
    assert len(cell) == 1
    joined = texts(fig)
    for shape in (f"{n} \u00d7 {d}", f"{d} \u00d7 {d_k}", f"{n} \u00d7 {d_k}", f"{d_k} \u00d7 {n}", f"{n} \u00d7 {n}"):
        assert shape in joined, shape
    with pytest.raises(ValueError, match="positive"):
        diagrams.qkv_shapes(0, d, d_k)


DRAWS = {
    "unrolled_rnn": lambda: diagrams.unrolled_rnn(),
    "lstm_cell": diagrams.lstm_cell,
    "recurrence_vs_attention": lambda: diagrams.recurrence_vs_attention(),
    "summary_table": lambda: diagrams.summary_table(),
    "transformer_block": lambda: diagrams.transformer_block(Block(32, heads=2, d_ff=128)),
    "qkv_shapes": lambda: diagrams.qkv_shapes(5, 8, 8),
}


def test_diagrams_are_deterministic_on_white():
    drawn = {name: draw() for name, draw in DRAWS.items()}
    assert all(fig.get_facecolor()[:3] == (1.0, 1.0, 1.0) for fig in drawn.values())
    script = "import json, test_diagrams as t\nprint(json.dumps({n: t.svg(d()) for n, d in t.DRAWS.items()}))"
    assert {name: svg(fig) for name, fig in drawn.items()} == json.loads(fresh_process.output_of(script))


def test_gradient_plot_is_log_scale_with_one_labelled_curve_per_model():
    reaches = {"rnn": torch.logspace(0, -10, 41), "attention": torch.full((41,), 0.05)}
    fig = plots.gradient_plot(reaches)
    (ax,) = fig.axes
    assert ax.get_yscale() == "log"
    assert [line.get_label() for line in ax.lines] == [plots.MODEL_LABELS["rnn"], plots.MODEL_LABELS["attention"]]


def test_accuracy_plot_draws_a_mean_line_and_a_dot_per_seed():
    models, lengths, seeds = ("rnn", "lstm_open"), (10, 30), (0, 1, 2)
    acc = {(m, n, s): 0.5 + 0.1 * s for m in models for n in lengths for s in seeds}
    fig = plots.accuracy_plot(acc, models, lengths, seeds)
    (ax,) = fig.axes
    means = [line for line in ax.lines if line.get_label() in plots.MODEL_LABELS.values()]
    assert [line.get_ydata().tolist() for line in means] == [[0.6, 0.6], [0.6, 0.6]]
    dots = sum(len(c.get_offsets()) for c in ax.collections)
    assert dots == len(models) * len(lengths) * len(seeds)


def test_tanh_plot_marks_the_slopes():
    fig = plots.tanh_plot((0, 1, 2, 3))
    joined = texts(fig)
    for label in ("1", "0.42", "0.071", "0.0099"):
        assert label in joined
