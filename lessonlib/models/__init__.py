"""Small reference models, written to be read: RNN, LSTM and GRU cells with torch.nn's parameter
layout, attention, and the seq2seq reverser. The tests check each against torch's own layers."""
