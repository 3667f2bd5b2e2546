"""Mixed-length batches for the seq2seq reverser: padding, the packed encoder and the attention mask.

The reference for every padded result is the same string run on its own, with no padding at all:
padding must change nothing, and without the mask it does.
"""
import pytest
import torch

from lessonlib.models import seq2seq as s2s


def _model(device: torch.device, mask: bool = True, attention: bool = True, seed: int = 0) -> s2s.Seq2Seq:
    return s2s.initial_model(attention, seed, hidden=16, mask=mask).to(device).eval()


def _padded(device, batch=12, min_len=2, max_len=9, seed=0):
    src, tgt = s2s.make_padded_batch(batch, min_len, max_len, torch.Generator().manual_seed(seed), device)
    return src, tgt, (src != s2s.PAD).sum(1)


def test_padded_batch_rows_are_reversals_then_eos_then_pad(device):
    src, tgt, lengths = _padded(device, batch=200, min_len=3, max_len=8)
    assert src.device.type == device.type and tgt.device.type == device.type
    assert lengths.min() == 3 and lengths.max() == 8, "lengths drawn over the whole range"
    assert src.shape == (200, 8) and tgt.shape == (200, 9)
    for s, t, n in zip(src.tolist(), tgt.tolist(), lengths.tolist()):
        digits = s[:n]
        assert all(s2s.DIGIT0 <= d < s2s.DIGIT0 + 10 for d in digits)
        assert s[n:] == [s2s.PAD] * (8 - n)
        assert t == digits[::-1] + [s2s.EOS] + [s2s.PAD] * (8 - n)


def test_packed_encoder_reads_each_string_as_if_alone(device):
    model = _model(device)
    src, _, lengths = _padded(device)
    assert (lengths < src.shape[1]).any(), "the batch must hold padding"
    with torch.no_grad():
        outputs, state = model.encoder(src)
        through_pad = model.encoder.rnn(model.encoder.embed(src))[1]
        for i, n in enumerate(lengths.tolist()):
            alone_out, alone_state = model.encoder(src[i:i + 1, :n])
            torch.testing.assert_close(outputs[i, :n], alone_out[0], atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(state[:, i], alone_state[:, 0], atol=1e-5, rtol=1e-5)
            assert (outputs[i, n:] == 0).all(), "padded positions: outputs of exactly 0"
            if n < src.shape[1]:  # without packing the final state has read the PADs
                assert not torch.allclose(through_pad[:, i], alone_state[:, 0], atol=1e-3)


def test_mask_gives_padded_keys_exactly_zero_weight(device):
    src, tgt, lengths = _padded(device)
    pad_key = (src == s2s.PAD)[:, None, :]                              # (B, 1, T_in)
    for mask, expect_zero in ((True, True), (False, False)):
        model = _model(device, mask=mask)
        with torch.no_grad():
            enc, state = model.encoder(src)
            bos = torch.full_like(tgt[:, :1], s2s.BOS)
            _, _, weights = model.decoder(torch.cat([bos, tgt[:, :-1]], 1), state, enc, model.source_mask(src))
        on_pad = weights.masked_select(pad_key.expand_as(weights))
        assert on_pad.numel() > 0
        assert (on_pad == 0).all() if expect_zero else (on_pad > 0).all()
        torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:2], device=device))


def test_with_the_mask_padding_changes_no_answer_and_without_it_does(device):
    src, _ = s2s.make_batch(5, 64, torch.Generator().manual_seed(2), device)
    wide = torch.nn.functional.pad(src, (0, 20), value=s2s.PAD)           # as in a batch 25 wide
    for mask in (True, False):
        model = _model(device, mask=mask)
        with torch.no_grad():
            enc, state = model.encoder(src)
            enc_w, state_w = model.encoder(wide)
            tgt = torch.full((64, 6), s2s.DIGIT0, device=device)
            alone = model(src, tgt)
            padded = model(wide, tgt)
        torch.testing.assert_close(state_w, state, atol=1e-6, rtol=1e-5)  # the packed encoder either way
        if mask:
            torch.testing.assert_close(padded, alone, atol=1e-5, rtol=1e-5)
            assert torch.equal(model.greedy_decode(wide, 8)[0], model.greedy_decode(src, 8)[0])
        else:
            assert not torch.allclose(padded, alone, atol=1e-3)


def test_exact_match_pad_to_pads_the_source_only():
    model = _model(torch.device("cpu"))
    calls = []
    original = model.greedy_decode
    model.greedy_decode = lambda src, max_len: calls.append(src) or original(src, max_len)
    s2s.exact_match(model, lengths=(4,), n=10, pad_to=11)
    (src,) = calls
    assert src.shape == (10, 11)
    assert (src[:, 4:] == s2s.PAD).all() and (src[:, :4] != s2s.PAD).all()


def test_same_seed_same_start_in_every_shared_layer():
    plain, attentive = (dict(s2s.initial_model(a, 5, hidden=16).named_parameters()) for a in (False, True))
    assert plain.keys() == attentive.keys()
    for name in plain:
        if name.startswith("decoder.combine."):
            continue
        assert torch.equal(plain[name], attentive[name]), name
    assert plain["decoder.combine.weight"].shape == (16, 16)
    assert attentive["decoder.combine.weight"].shape == (16, 32)
    other = dict(s2s.initial_model(False, 6, hidden=16).named_parameters())
    assert not torch.equal(plain["encoder.rnn.weight_hh_l0"], other["encoder.rnn.weight_hh_l0"])


@pytest.mark.parametrize("padded", [False, True])
def test_same_seed_same_batches_with_or_without_attention_and_mask(padded, monkeypatch):
    seen = []

    def recording(make):
        def wrapper(*args, **kwargs):
            src, tgt = make(*args, **kwargs)
            seen.append(src)
            return src, tgt
        return wrapper

    for name in ("make_batch", "make_padded_batch"):
        monkeypatch.setattr(s2s, name, recording(getattr(s2s, name)))
    runs = []
    for attention, mask in ((False, True), (True, True), (True, False)):
        seen.clear()
        s2s.train(attention, seed=1, steps=4, hidden=8, padded=padded, mask=mask, progress=False)
        runs.append(list(seen))
    assert len(runs[0]) >= 4
    for run in runs[1:]:
        assert len(run) == len(runs[0]) and all(torch.equal(a, b) for a, b in zip(run, runs[0]))


def test_padded_training_learns_short_reversal(device):
    # chance for an exact 4-digit answer is 1e-4; trained on mixed-length padded batches, the
    # masked model gets most right, alone and inside a wider padded batch alike
    model = s2s.train(True, seed=0, device=device, steps=300, lr=1e-2, min_len=2, max_len=5, hidden=32,
                      padded=True, progress=False)
    alone = s2s.exact_match(model, lengths=[4], n=200, device=device)
    wide = s2s.exact_match(model, lengths=[4], n=200, device=device, pad_to=12)
    assert alone[4] > 0.5, alone
    assert wide == alone
