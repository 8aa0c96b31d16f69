"""The Penn Treebank half of DuSell & Chiang (2022) (§5, App. 10–11) as an experiment of the DAG:
``settings`` (the ``ptb`` section), ``dag`` (paths, targets, lookups of ``workflow/rules/ptb.smk``)
and ``commands`` (``stacklm ptb train|evaluate|select|report``)."""
