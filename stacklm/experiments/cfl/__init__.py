"""The context-free language experiments of DuSell & Chiang (2022) as one experiment unit:
``settings`` (the ``cfl`` section), ``data`` (the test sets and each run's own data), ``dag``
(paths, targets and lookups of ``workflow/rules/cfl.smk``), ``commands`` (``stacklm cfl``),
``search`` (the grid and the selection), ``training`` and ``evaluation`` (a run trained, a
selected run scored), ``actions`` and ``figures`` (Figures 1 and 2, test Δ by length)."""
