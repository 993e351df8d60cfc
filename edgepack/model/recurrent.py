"""placeholder"""
LSTM = GRU = None
