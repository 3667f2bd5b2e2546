"""Figure code: the house plotting style, diagrams drawn by code, and the LSTM walkthrough widget."""
