"""Exposure bias: teacher-forced and free-running accuracy by position, checked against plain loops."""
import pytest
import torch

from lessonlib.experiments import exposure_bias
from lessonlib.models import seq2seq as s2s


@pytest.fixture(scope="module")
def half_trained() -> s2s.Seq2Seq:
    # trained just enough to get some 5-digit strings right and others wrong
    return s2s.train(False, seed=0, steps=150, lr=1e-2, min_len=2, max_len=5, hidden=24, progress=False)


def test_after_first_error():
    wrong = torch.tensor([[0, 1, 0, 0], [0, 0, 0, 0], [1, 0, 0, 1], [0, 0, 0, 1]], dtype=torch.bool)
    want = torch.tensor([[0, 0, 1, 1], [0, 0, 0, 0], [0, 1, 1, 1], [0, 0, 0, 0]], dtype=torch.bool)
    assert torch.equal(exposure_bias.after_first_error(wrong), want)


@torch.no_grad()
def test_position_accuracy_matches_step_by_step_decoding(half_trained):
    model, T, n = half_trained, 5, 300
    result = exposure_bias.position_accuracy(model, T, n=n, seed=7)
    src, tgt = s2s.make_batch(T, n, torch.Generator().manual_seed(7 + T))  # the strings it used
    enc, state = model.encoder(src)
    tf_state, fr_state = state, state
    tf_in = fr_in = torch.full((n,), s2s.BOS)
    tf_right, fr_right = [], []
    stopped = torch.zeros(n, dtype=torch.bool)  # free running ends at the model's first </s>
    for t in range(T + 1):  # one step at a time: fed the target (teacher) or its own output (free)
        tf_logits, tf_state, _ = model.decoder.step(tf_in, tf_state, enc)
        fr_logits, fr_state, _ = model.decoder.step(fr_in, fr_state, enc)
        tf_right.append(tf_logits.argmax(-1) == tgt[:, t])
        fr_out = fr_logits.argmax(-1)
        fr_right.append((fr_out == tgt[:, t]) & ~stopped)
        stopped |= fr_out == s2s.EOS
        tf_in, fr_in = tgt[:, t], fr_out
    assert stopped.any(), "some strings end early: the case the rule is for"
    tf_right, fr_right = torch.stack(tf_right, 1), torch.stack(fr_right, 1)   # (n, T+1)

    torch.testing.assert_close(result.teacher_forced, tf_right.float().mean(0))
    torch.testing.assert_close(result.free_running, fr_right.float().mean(0))
    assert torch.equal(result.exact_free_running, fr_right.all(1))
    exact = result.exact_teacher_forced
    assert exact.any() and not exact.all(), "the model must get some strings right and some wrong"
    assert torch.equal(exact, result.exact_free_running)

    # after a string's first free-running mistake, by a plain loop over strings
    tf_after, fr_after = [], []
    for i in range(n):
        mistakes = (~fr_right[i]).nonzero()
        if len(mistakes):
            first = mistakes[0].item()
            tf_after += tf_right[i, first + 1:].tolist()
            fr_after += fr_right[i, first + 1:].tolist()
    assert result.after_error_teacher_forced == pytest.approx(sum(tf_after) / len(tf_after))
    assert result.after_error_free_running == pytest.approx(sum(fr_after) / len(fr_after))
