import math

import numpy as np

from lessonlib.experiments import step_cost


def test_macs_attention_grows_linearly_rnn_stays_constant():
    n = [1, 2, 4, 100, 1000]
    d = 64
    macs = step_cost.step_macs(n, d, cell="gru")
    # a GRU step: 3 gates, each an input and a hidden matrix of d x d
    assert (macs["rnn"] == 3 * 2 * d * d).all()
    # attention: one dot product (d) and one weighted add (d) per earlier position
    assert (macs["attention"] == 2 * d * np.asarray(n)).all()
    # doubling the prefix doubles the attention cost and leaves the RNN's alone
    doubled = step_cost.step_macs([2 * k for k in n], d, cell="gru")
    assert (doubled["attention"] == 2 * macs["attention"]).all()
    assert (doubled["rnn"] == macs["rnn"]).all()


def test_macs_gate_counts():
    d = 8
    per_cell = {c: step_cost.step_macs([1], d, cell=c)["rnn"][0] for c in ("rnn", "gru", "lstm")}
    assert per_cell["gru"] == 3 * per_cell["rnn"] and per_cell["lstm"] == 4 * per_cell["rnn"]


def test_time_step_shapes(device):
    out = step_cost.time_step([4, 16, 64], d=32, device=device, reps=3, warmup=1)
    assert list(out["n"]) == [4, 16, 64]
    for key in ("rnn", "attention"):
        assert out[key].shape == (3,) and np.isfinite(out[key]).all() and (out[key] > 0).all()


def test_rnn_family_ratios_shapes(device):
    out = step_cost.rnn_family_ratios(device, seq_len=8, batch=4, d=16, reps=3, warmup=1)
    assert set(out["seconds"]) == {"rnn", "gru", "lstm"}
    assert out["ratio"]["rnn"] == 1.0
    assert all(math.isfinite(r) and r > 0 for r in out["ratio"].values())
    assert out["macs_ratio"] == {"rnn": 1.0, "gru": 3.0, "lstm": 4.0}
