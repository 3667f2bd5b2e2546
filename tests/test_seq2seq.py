import torch

from lessonlib.models import seq2seq as s2s


def _model(attention: bool, device: torch.device, seed: int = 0, cell: str = "gru") -> s2s.Seq2Seq:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return s2s.Seq2Seq(attention, hidden=16, embed=8, cell=cell).to(device).eval()


def test_make_batch_is_the_reversal_then_eos(device):
    src, tgt = s2s.make_batch(7, 50, torch.Generator().manual_seed(0), device)
    assert src.shape == (50, 7) and tgt.shape == (50, 8)
    assert src.device.type == device.type and tgt.device.type == device.type
    assert ((src >= s2s.DIGIT0) & (src < s2s.DIGIT0 + 10)).all()  # digits only: no PAD/BOS/EOS
    assert (tgt[:, -1] == s2s.EOS).all()
    for s, t in zip(src.tolist(), tgt.tolist()):
        assert t[:-1] == s[::-1]
    # the text helpers agree: the target spells the source backwards
    assert s2s.decode(tgt[0]) == s2s.decode(src[0])[::-1]
    assert s2s.to_text(tgt[0])[-1] == "</s>"
    # same generator seed, same batch, on any device
    src2, _ = s2s.make_batch(7, 50, torch.Generator().manual_seed(0), "cpu")
    assert torch.equal(src.cpu(), src2)


def test_text_helpers_stop_at_eos_and_skip_pad():
    d = {str(i): s2s.DIGIT0 + i for i in range(10)}
    tokens = [d["4"], d["0"], s2s.EOS, d["7"], s2s.PAD]
    assert s2s.decode(tokens) == "40"
    assert s2s.to_text(tokens) == ["4", "0", "</s>"]


def test_shapes(device):
    src, tgt = s2s.make_batch(6, 5, torch.Generator().manual_seed(0), device)
    for attention, cell in [(True, "gru"), (False, "gru"), (True, "lstm"), (False, "lstm")]:
        model = _model(attention, device, cell=cell)
        assert model(src, tgt).shape == (5, 7, s2s.VOCAB_SIZE)
        tokens, attn = model.greedy_decode(src, max_len=9)
        assert tokens.shape == (5, 9) and tokens.device.type == device.type
        if attention:
            assert attn.shape == (5, 9, 6)
        else:
            assert attn is None


def test_greedy_pads_after_eos(device):
    src, _ = s2s.make_batch(4, 200, torch.Generator().manual_seed(1), device)
    # An untrained model never writes EOS by itself; with EOS's output bias raised, it writes EOS
    # at every step, and everything after the first one must come out as PAD.
    model = _model(True, device)
    with torch.no_grad():
        model.decoder.out.bias[s2s.EOS] = 1e3
    tokens, _ = model.greedy_decode(src, max_len=6)
    assert (tokens[:, 0] == s2s.EOS).all() and (tokens[:, 1:] == s2s.PAD).all()
    # A briefly trained model ends mid-row: its digits, EOS, then only PAD.
    trained = s2s.train(True, seed=0, device=device, steps=250, lr=1e-2, min_len=2, max_len=5,
                        hidden=32, progress=False)
    tokens, _ = trained.greedy_decode(src, max_len=9)
    rows = tokens.tolist()
    assert sum(row[4] == s2s.EOS for row in rows) > 100  # most rows: four digits, then EOS
    for row in rows:
        end = row.index(s2s.EOS) if s2s.EOS in row else len(row)
        assert s2s.PAD not in row[:end], row
        assert all(t == s2s.PAD for t in row[end + 1:]), row


def test_attention_rows_are_distributions(device):
    src, _ = s2s.make_batch(9, 8, torch.Generator().manual_seed(0), device)
    _, attn = _model(True, device).greedy_decode(src, max_len=10)
    assert (attn >= 0).all()
    torch.testing.assert_close(attn.sum(-1), torch.ones(8, 10, device=device))


def test_teacher_forcing_equals_step_by_step(device):
    # decoder.step (greedy decoding) and the whole-sequence pass (training) are the same model
    src, tgt = s2s.make_batch(6, 4, torch.Generator().manual_seed(0), device)
    for attention, cell in [(True, "gru"), (False, "lstm")]:
        model = _model(attention, device, cell=cell)
        full = model(src, tgt)
        enc, state = model.encoder(src)
        inputs = torch.cat([torch.full_like(tgt[:, :1], s2s.BOS), tgt[:, :-1]], dim=1)
        steps = []
        for t in range(inputs.shape[1]):
            logits, state, _ = model.decoder.step(inputs[:, t], state, enc)
            steps.append(logits)
        # cuDNN may run RNNs in TF32 (~1e-3 relative), and picks kernels by sequence length
        tol = {"atol": 1e-3, "rtol": 1e-3} if device.type == "cuda" else {}
        torch.testing.assert_close(torch.stack(steps, 1), full, **tol)


def test_lesson_snippet_gives_the_models_weights(device):
    # the page recomputes attention by hand from the model's real states:
    # scores = decoder_hidden @ encoder_outputs^T; weights = softmax(scores); context = weights @ enc
    model = _model(True, device)
    src, _ = s2s.make_batch(8, 3, torch.Generator().manual_seed(0), device)
    enc, state = model.encoder(src)
    bos = torch.full((3, 1), s2s.BOS, device=device)
    hidden, _ = model.decoder.rnn(model.decoder.embed(bos), state)  # (B, 1, H)
    weights = torch.softmax(hidden @ enc.transpose(1, 2), dim=-1)
    _, _, model_weights = model.decoder(bos, state, enc)
    torch.testing.assert_close(weights, model_weights)


def test_without_attention_only_the_final_state_reaches_the_decoder(device):
    src, tgt = s2s.make_batch(8, 4, torch.Generator().manual_seed(0), device)
    bos = torch.full_like(tgt[:, :1], s2s.BOS)
    inputs = torch.cat([bos, tgt[:, :-1]], dim=1)
    for attention in (False, True):
        model = _model(attention, device)
        with torch.no_grad():
            enc, state = model.encoder(src)
            perturbed = enc.clone()
            perturbed[:, :-1] += torch.randn_like(perturbed[:, :-1])  # every state but the last
            logits, _, _ = model.decoder(inputs, state, enc)
            logits_p, _, _ = model.decoder(inputs, state, perturbed)
        if attention:
            assert not torch.allclose(logits, logits_p)  # the check can see a difference
        else:
            assert torch.equal(logits, logits_p)


def test_training_is_deterministic_per_seed():
    threads = torch.get_num_threads()
    torch.set_num_threads(3)  # not the suite's one thread (tests/conftest.py), so that a restore shows
    try:
        a = s2s.train(True, seed=3, steps=15, hidden=16, progress=False)
        assert torch.get_num_threads() == 3  # train runs in one CPU thread, then restores
    finally:
        torch.set_num_threads(threads)
    b = s2s.train(True, seed=3, steps=15, hidden=16, progress=False)
    c = s2s.train(True, seed=4, steps=15, hidden=16, progress=False)
    for (name, pa), pb in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(pa, pb), name
    assert not all(torch.equal(pa, pc) for pa, pc in zip(a.state_dict().values(), c.state_dict().values()))


def test_train_both_is_train_twice_in_any_number_of_processes():
    args = dict(seed=3, steps=15, hidden=16, progress=False)
    alone = [s2s.train(attention, **args) for attention in (False, True)]
    for workers in (1, 2):
        both = s2s.train_both(dict(attention=False), dict(attention=True), workers=workers, **args)
        for a, b in zip(alone, both):
            assert a.attention == b.attention
            for (name, pa), pb in zip(a.state_dict().items(), b.state_dict().values()):
                assert torch.equal(pa, pb), (workers, name)


def test_short_training_learns_short_reversal(device):
    # chance for an exact 4-digit answer is 1e-4; a few hundred steps on short strings get
    # most of them right, with and without attention (the bottleneck only bites when long)
    for attention in (False, True):
        model = s2s.train(attention, seed=0, device=device, steps=250, lr=1e-2, min_len=2, max_len=5,
                          hidden=32, progress=False)
        acc = s2s.exact_match(model, lengths=[4], n=200, device=device)
        assert acc[4] > 0.5, (attention, acc)
