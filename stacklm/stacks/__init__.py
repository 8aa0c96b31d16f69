"""Differentiable stacks behind one interface: actions in, reading out (see ``base``)."""
