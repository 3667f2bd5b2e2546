"""Small reference models, written to be read: RNN, LSTM and GRU cells with torch.nn's parameter
layout, attention, and the seq2seq reverser. The tests check each against torch's own layers.
The recurrence lesson's layers (linear attention, minGRU, gated linear attention, a selective SSM)
are each a choice of a_t and b_t in h_t = a_t * h_{t-1} + b_t, computed by scan.py; their tests
check each one's recurrent (generation) form against its parallel (training) form."""
