"""The syntactic transformations of DuSell & Cotterell (2025) as one experiment unit: ``settings``
(its sections), ``data`` (the data stage's paths and options), ``dag`` (paths, targets and
lookups of the rules), ``commands`` (``stacklm train``, ``evaluate``, ``hparams``, ``select``,
``aggregate``, ``report``, ``constructions``, ``progress``), ``search`` (the trials' draws and
the selection), ``training`` and ``evaluation`` (runs trained, runs scored), ``report`` (the
tables and Figure 3), ``constructions`` (the metrics per construction) and ``progress`` (where
a pipeline run stands)."""
