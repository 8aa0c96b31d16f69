"""Faster implementations of the models and stacks: compiled CPU kernels and their autograd functions.

``stacklm.models`` and ``stacklm.stacks`` hold one PyTorch implementation of each model and stack,
the papers' mathematics; ``stacklm.kernels.backend.accelerate`` puts this package's subclasses of
them in place, once, for the command that trains or evaluates.
"""
