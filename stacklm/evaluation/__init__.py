"""Evaluation: exact expected accuracies, partial accuracies (exact and sampled), log ratios,
the CFL cross-entropy difference, and the ``stacklm evaluate`` command."""
