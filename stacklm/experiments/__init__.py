"""The experiments, each a unit with one layout: ``settings`` (its settings section, frozen
dataclasses whose defaults are the paper's), ``data`` (the data its runs read), ``dag`` (paths,
targets and lookups of its rules), ``commands`` (its command line: every command's options; each
command's function imported when it runs), and modules named for what they hold (``search``,
``training``, ``evaluation``, ``report`` …). The units: ``transformations`` (DuSell & Cotterell
(2025), with the syntax-infused option of Sundararaman et al. (2019)), ``cfl`` (DuSell & Chiang
(2022), the context-free languages) and ``ptb`` (DuSell & Chiang (2022), the Penn Treebank and
its SG scores). ``common`` holds what they share. The library below them (semiring, grammars,
tasks, data, stacks, models, training, evaluation, tracking, report) never imports an
experiment; the import contract of ``pyproject.toml`` checks it.
"""
