"""The encoder-decoder diagram: one cell per token, the encoder's final state handed over (never
called "context", the word the lesson keeps for attention's weighted sum), and with attention one
line per (decoder step, encoder state) whose width is the weight."""
import io
import json

import fresh_process
import matplotlib

import lessonlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Rectangle  # noqa: E402

from lessonlib.figures import seq2seq_diagram as diagram  # noqa: E402

SOURCE, WRITTEN = ["1", "4", "7"], ["7", "4", "1", "</s>"]


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def texts(fig) -> list[str]:
    return [t.get_text() for ax in fig.axes for t in ax.texts]


def attention_lines(fig) -> list[FancyArrowPatch]:
    return [p for ax in fig.axes for p in ax.patches
            if isinstance(p, FancyArrowPatch) and p.get_label() == "attention"]


def test_one_cell_per_token_and_one_final_state_handed_over():
    fig = diagram.encoder_decoder(SOURCE, WRITTEN, hidden=64)
    labels = texts(fig)
    assert labels.count("GRU") == len(SOURCE) + len(WRITTEN)
    assert "final state:\n64 numbers" in labels
    for figure in (fig, diagram.encoder_decoder(SOURCE, WRITTEN, hidden=8, weights=torch.full((4, 3), 1 / 3))):
        assert not any("context" in label for label in texts(figure))  # attention's word, not the hand-over's
    boxes = [p for ax in fig.axes for p in ax.patches if isinstance(p, FancyBboxPatch)]
    assert len(boxes) == len(SOURCE) + len(WRITTEN) + 1  # cells and the final state
    # the decoder reads <s> and then each token it wrote, and writes WRITTEN
    for token in ["<s>", *SOURCE, *WRITTEN]:
        assert token in labels
    assert attention_lines(fig) == []


def test_attention_lines_are_as_wide_as_the_weights():
    weights = torch.tensor([[0.0, 0.1, 0.9], [0.0, 0.7, 0.3], [1.0, 0.0, 0.0], [0.2, 0.2, 0.6]])
    fig = diagram.encoder_decoder(SOURCE, WRITTEN, hidden=8, weights=weights)
    widths = sorted(line.get_linewidth() for line in attention_lines(fig))
    drawn = sorted(diagram.MAX_LINE_WIDTH * w for w in weights.flatten().tolist() if w > 0)
    assert widths == pytest.approx(drawn)  # one line per nonzero weight, none for a zero one


def test_rejects_weights_it_cannot_draw():
    with pytest.raises(ValueError, match="must be"):
        diagram.encoder_decoder(SOURCE, WRITTEN, hidden=8, weights=torch.full((3, 4), 0.25))
    with pytest.raises(ValueError, match="sum to 1"):
        diagram.encoder_decoder(SOURCE, WRITTEN, hidden=8, weights=torch.full((4, 3), 0.5))


def outlined_cells(fig) -> list[tuple[int, int]]:
    """(row, column) of every outlined cell of a heatmap."""
    (ax, _colorbar) = fig.axes
    cells = [p for p in ax.patches if isinstance(p, Rectangle) and not p.get_fill()]
    return sorted((round(p.get_y() + 0.5), round(p.get_x() + 0.5)) for p in cells)


def test_mirror_heatmap_outlines_the_mirror_of_every_digit_row():
    source, written = ["1", "4", "7", "2"], ["2", "7", "4", "1", "</s>"]
    weights = torch.softmax(torch.randn(5, 4, generator=torch.Generator().manual_seed(1)), -1)
    fig = diagram.mirror_heatmap(weights, source, written)
    # output step t writes source position n - 1 - t; </s> has no mirror
    assert outlined_cells(fig) == [(0, 3), (1, 2), (2, 1), (3, 0)]
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == source
    assert [t.get_text() for t in ax.get_yticklabels()] == written
    assert (ax.images[0].get_array() == weights.numpy()).all()
    (legend_text,) = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend_text.startswith("mirror")
    with pytest.raises(ValueError, match="must be"):
        diagram.mirror_heatmap(weights.T, source, written)


def test_mirror_cells_stop_at_the_shorter_side():
    assert diagram.mirror_cells(3, 2) == [(0, 2), (1, 1)]
    assert diagram.mirror_cells(2, 4) == [(0, 1), (1, 0)]


def svg_of(draw) -> str:
    """The SVG of the figure draw() makes, under matplotlib's defaults: a page run earlier in this
    process (lessonlib.start_page) leaves its house style, which a fresh interpreter lacks."""
    buffer = io.StringIO()
    with matplotlib.style.context("default"), matplotlib.rc_context({"svg.hashsalt": "test", "svg.fonttype": "none"}):
        draw().savefig(buffer, format="svg", metadata={"Date": None})
    return buffer.getvalue()


DRAWS = {
    "encoder_decoder": lambda: diagram.encoder_decoder(SOURCE, WRITTEN, hidden=8),
    "with_attention": lambda: diagram.encoder_decoder(SOURCE, WRITTEN, hidden=8, weights=torch.full((4, 3), 1 / 3)),
    "mirror_heatmap": lambda: diagram.mirror_heatmap(torch.eye(4, 3) * 0.5 + 0.5 / 3, SOURCE, WRITTEN),
}


def test_same_picture_in_a_fresh_interpreter():
    lessonlib.start_page()  # as a page run earlier in this process leaves it
    drawn = {name: svg_of(draw) for name, draw in DRAWS.items()}
    script = ("import json, test_seq2seq_diagram as t\n"
              "print(json.dumps({n: t.svg_of(d) for n, d in t.DRAWS.items()}))")
    assert drawn == json.loads(fresh_process.output_of(script))
