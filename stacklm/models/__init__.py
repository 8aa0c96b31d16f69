"""Language models: RNN, LSTM and transformer, with stacks (stack RNNs, stack attention) and
syntax-infused embeddings; ``registry`` names them, ``sizing`` fits them to a parameter budget."""
