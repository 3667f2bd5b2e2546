"""The encoder-decoder diagram: one cell per token, one context vector, and with attention one
line per (decoder step, encoder state) whose width is the weight."""
import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch  # noqa: E402

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


def test_one_cell_per_token_and_one_context_vector():
    fig = diagram.encoder_decoder(SOURCE, WRITTEN, hidden=64)
    labels = texts(fig)
    assert labels.count("GRU") == len(SOURCE) + len(WRITTEN)
    assert "context:\n64 numbers" in labels
    boxes = [p for ax in fig.axes for p in ax.patches if isinstance(p, FancyBboxPatch)]
    assert len(boxes) == len(SOURCE) + len(WRITTEN) + 1  # cells and the context vector
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


def test_same_call_same_picture():
    weights = torch.softmax(torch.randn(4, 3, generator=torch.Generator().manual_seed(0)), -1)

    def svg() -> str:
        buffer = io.StringIO()
        fig = diagram.encoder_decoder(SOURCE, WRITTEN, hidden=8, weights=weights)
        with matplotlib.rc_context({"svg.hashsalt": "test", "svg.fonttype": "none"}):
            fig.savefig(buffer, format="svg", metadata={"Date": None})
        return buffer.getvalue()

    assert svg() == svg()
