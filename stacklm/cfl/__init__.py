"""The five context-free language tasks of the RNS-RNN paper: PCFGs, exact inside and sampling, data sets."""
