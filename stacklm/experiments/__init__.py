"""The experiments, each a unit that owns its settings section, paths, DAG targets, lookups and
commands: ``transformations`` (DuSell & Cotterell (2025), with the syntax-infused option of
Sundararaman et al. (2019)), ``cfl`` (DuSell & Chiang (2022), the context-free languages) and
``ptb`` (DuSell & Chiang (2022), the Penn Treebank and its SG scores).
``common`` holds what they share. The library below them (semiring, grammars, tasks, data,
stacks, models, training, evaluation, tracking, report) never imports an experiment; the import
contract of ``pyproject.toml`` checks it.
"""
