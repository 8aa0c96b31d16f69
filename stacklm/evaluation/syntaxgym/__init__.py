"""The SG score of a language model, computed from SyntaxGym suite files without Docker or lm-zoo
(DuSell & Chiang (2022) §5.2, App. 11; ``docs/design/cfl-and-ptb.md#sg-score``).

- ``suite``: a suite file read and checked; ``formula``: its predictions parsed (never ``eval``);
- ``alignment``: sentences, PTB tokens (``<unk>`` outside the vocabulary), tokens to regions;
- ``score``: surprisals from a language model, region sums, (item, prediction) results;
- ``circuits``: the SG score and the score per circuit;
- ``model``: a PTB language model (``stacklm.models.ptb``) as the language model of ``score``;
- ``sources``: the paper's 33 suites and circuit map pinned by sha256, and the SG score over them.
"""
