"""The Penn Treebank half of DuSell & Chiang (2022) (§5, App. 10–11) as an experiment unit:
``settings`` (the ``ptb`` section), ``data`` (the PTB files and SyntaxGym suites, a split's
chunks), ``dag`` (paths, targets and lookups of ``workflow/rules/ptb.smk``), ``commands``
(``stacklm ptb download|suites|train|evaluate|select|report``), ``search`` (a restart's draw and
seeds, the selection), ``training`` and ``evaluation`` (a restart trained, a restart scored) and
``report`` (the tables and the figure)."""
