"""What lesson 1 reads off the gradient-reach curves: the log-line fit, the warm-up option,
the shared sample of model and inputs, and the two plots drawn from them."""
import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from lessonlib.experiments.gradient_reach import gradient_reach, jacobian_norms, log_line, sample  # noqa: E402
from lessonlib.figures import plots  # noqa: E402


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def test_log_line_recovers_a_geometric_decay_exactly():
    distance = torch.arange(30, dtype=torch.float64)
    reach = 3.0 * 0.6**distance
    fit = log_line(reach)
    assert fit.factor == pytest.approx(0.6, rel=1e-9) and fit.r_squared == pytest.approx(1.0, abs=1e-12)
    # the first point is left out by default: a different value there changes nothing
    reach[0] = 100.0
    assert log_line(reach).factor == pytest.approx(0.6, rel=1e-9)
    assert log_line(reach, 0).factor != pytest.approx(0.6, rel=1e-3)


def test_log_line_r_squared_sees_a_bend_and_halves_see_it_too():
    distance = torch.arange(1, 41, dtype=torch.float64)
    bent = torch.where(distance <= 20, 0.5**distance, 0.5**20 * 0.9 ** (distance - 20))
    whole, near, far = log_line(bent, 0), log_line(bent, 0, 20), log_line(bent, 20)
    assert whole.r_squared < 0.95
    assert near.factor == pytest.approx(0.5, rel=1e-9) and far.factor == pytest.approx(0.9, rel=1e-9)


def test_log_line_of_a_flat_curve_has_factor_one():
    noise = torch.randn(20, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    fit = log_line(0.05 * (1 + 1e-3 * noise))
    assert fit.factor == pytest.approx(1.0, abs=1e-3)


def test_sample_is_what_gradient_reach_measures():
    model, x = sample("rnn", 1, 25)
    expected = jacobian_norms(model, x).flip(0)
    torch.testing.assert_close(gradient_reach("rnn", 25, (1,)), expected)
    again, x_again = sample("rnn", 1, 25)
    assert torch.equal(x, x_again) and all(torch.equal(p, q) for p, q in zip(model.parameters(), again.parameters()))


def test_warmup_measures_the_last_positions_of_a_longer_sequence(device):
    warm = gradient_reach("lstm_open", 20, (0, 1), device, warmup=15)
    last_20 = []
    for seed in (0, 1):
        model, x = sample("lstm_open", seed, 35)  # 15 + 20 inputs
        last_20.append(jacobian_norms(model.to(device), x.to(device))[15:].flip(0))
    expected = torch.stack(last_20).mean(0).cpu()
    torch.testing.assert_close(warm, expected, rtol=1e-4, atol=1e-7)
    assert not torch.allclose(warm, gradient_reach("lstm_open", 20, (0, 1), device), rtol=1e-2)


def test_radius_plot_one_labelled_log_curve_per_radius_in_order():
    reaches = {3.0: torch.logspace(0, 5, 30), 0.6: torch.logspace(0, -9, 30), 1.5: torch.ones(30)}
    fig = plots.radius_plot(reaches)
    (ax,) = fig.axes
    assert ax.get_yscale() == "log"
    labels = [line.get_label() for line in ax.lines]
    assert labels == [f"RNN, spectral radius of $W_h$ {r:.2f}" for r in (0.6, 1.5, 3.0)]
    assert [line.get_ydata()[-1] for line in ax.lines] == pytest.approx([1e-9, 1.0, 1e5])
    with pytest.raises(ValueError):
        plots.radius_plot({r: torch.ones(3) for r in (0.5, 1.0, 2.0, 3.0)})


def test_clipping_plot_draws_each_seed_and_the_median():
    steps, seeds = 50, 3
    loss = torch.linspace(1, 0.01, steps)[:, None].repeat(1, seeds) * torch.tensor([1.0, 2.0, 4.0])
    norm = torch.full((steps, seeds), 2.0)
    fig = plots.clipping_plot({"clipped": (loss, norm)}, clip=1.0)
    left, right = fig.axes
    assert left.get_yscale() == right.get_yscale() == "log"
    median = [line for line in right.lines if line.get_label() == "clipped"]
    assert len(median) == 1 and median[0].get_ydata() == pytest.approx((loss[:, 1]).tolist())
    assert len(right.lines) == seeds + 1 + 1  # a line per seed, the median, and the loss of guessing
    thresholds = [line for line in left.lines if line.get_label() == "clipping threshold"]
    assert len(thresholds) == 1 and thresholds[0].get_ydata()[0] == 1.0
    guessing = [line for line in right.lines if line.get_label() == "loss of guessing"]
    assert guessing[0].get_ydata()[0] == pytest.approx(math.log(2))
    with pytest.raises(ValueError):
        plots.clipping_plot({str(k): (loss, norm) for k in range(3)}, clip=1.0)
