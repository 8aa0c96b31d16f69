"""Closed-form parameter counts, and the width that brings each model nearest a budget.

DuSell & Cotterell (2025) §5: "We automatically adjust d for each model so that its total parameter count is as
close as possible to 200k ... We use SymPy to work out the algebra." Each count below is a
polynomial in the width d (transformer d_model, RNN/LSTM hidden units), written from the
architecture's definition and not from the built modules, so that tests can check one against
the other. Terms (V = output symbols with EOS, L layers, r = reading size, m = stack vector
size, Q = |Q|, S = |Γ|, f = +Syn feature width, Φ = number of feature values of all kinds):

- tied embedding of R rows and width W: R·W; +Syn: R·(W − f) + f·Φ;
- transformer: R = V + 1 (BOS); per attention layer 4d(d + 1) (Q, K, V, output with biases)
  + FFN (d + 1)·2d + (2d + 1)·d + two layer norms 4d; a stack-attention layer replaces the
  attention by its action layers (no bias) and W_y (r·d); final layer norm 2d;
- RNN/LSTM (g = 1 or 4 gates): learned initial states L·d; layer 1 g·d·(W + r + d + 1), other
  layers g·d·(2d + 1); R = V rows of width W = d (+ r with +R);
- stack interfaces with bias (b = 1) or without (b = 0): superposition (3 + m)(d + b);
  stratification (2 + m)(d + b); nondeterministic QS(2QS + Q)(d + b); dVPDA
  (QS(2QS + Q) + m)(d + b) + m (learned bottom vector);
- RNS-RNN CFL controllers (one-hot input, two biases, affine output): g·d·(V + r + d + 2) + (d + 1)·V.

The width is the feasible integer (transformers: a multiple of the 4 heads, hence even; +Syn:
room for a token embedding) whose count lies nearest the budget: the counts increase with the
width, so the feasible widths on either side of the real root of count(d) = budget decide it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from stacklm.errors import StacklmError
from stacklm.models.options import ModelOptions
from stacklm.models.stack_interface import (
    NondeterministicSpec,
    StackSpec,
    StratificationSpec,
    SuperpositionSpec,
    VectorNondeterministicSpec,
    transition_count,
)

if TYPE_CHECKING:
    import sympy


@functools.cache
def width_symbol() -> sympy.Symbol:
    """d, the width the counts are polynomials in. SymPy loads here, at the first count, not with
    the module: a job that rebuilds a saved model (``stacklm evaluate``) never sizes one, and
    importing SymPy would cost it 0.4 CPU-seconds."""
    import sympy

    return sympy.Symbol("d", positive=True)


def __getattr__(name: str) -> object:
    """``WIDTH``, the symbol d (:func:`width_symbol`)."""
    if name == "WIDTH":
        return width_symbol()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def interface_count(spec: StackSpec, width: sympy.Expr, bias: bool) -> sympy.Expr:
    """Parameters of the layers that compute a stack's actions from a width-``width`` input."""
    inputs = width + (1 if bias else 0)
    match spec:
        case SuperpositionSpec():
            return (3 + spec.vector_size) * inputs
        case StratificationSpec():
            return (2 + spec.vector_size) * inputs
        case NondeterministicSpec():
            return transition_count(spec.num_states, spec.num_symbols) * inputs
        case VectorNondeterministicSpec():
            return (transition_count(spec.num_states, spec.num_symbols) + spec.vector_size) * inputs + spec.vector_size
    raise TypeError(f"unknown stack spec {spec!r}")


@dataclass(frozen=True)
class Shape:
    """What the count of one architecture depends on, besides the vocabulary and the width."""

    base: Literal["transformer", "rnn", "lstm"]
    family: Literal["bearing-syntactic-fruit", "rns-rnn"]
    layers: tuple[StackSpec | None, ...] = ()  # transformer: per layer; None = attention
    stack: StackSpec | None = None  # stack RNN
    reading_to_output: bool = False
    syntax: bool = False
    num_layers: int = 3


@dataclass(frozen=True)
class Sizing:
    width: int
    parameters: int
    count: sympy.Expr  # the closed form in WIDTH
    root: float | None  # real solution of count = budget; None when the width is fixed


def embedding_count(rows: int, width: sympy.Expr, syntax: bool, feature_width: int, feature_values: int) -> sympy.Expr:
    if syntax:
        return rows * (width - feature_width) + feature_width * feature_values
    return rows * width


def feedforward_count(d: sympy.Expr) -> sympy.Expr:
    return (d + 1) * 2 * d + (2 * d + 1) * d


def parameter_count(shape: Shape, vocabulary_size: int, options: ModelOptions, feature_values: int = 0) -> sympy.Expr:
    """The closed-form count of ``shape`` as a polynomial in ``WIDTH``."""
    import sympy

    d = width_symbol()
    f = options.syntax_feature_width
    if shape.base == "transformer":
        total = embedding_count(vocabulary_size + 1, d, shape.syntax, f, feature_values) + 2 * d
        for layer in shape.layers:
            sublayer = 4 * d * (d + 1) if layer is None else interface_count(layer, d, bias=False) + layer.reading_size * d
            total += sublayer + feedforward_count(d) + 4 * d
        return sympy.expand(total)
    gates = 4 if shape.base == "lstm" else 1
    reading = 0 if shape.stack is None else shape.stack.reading_size
    stack = 0 if shape.stack is None else interface_count(shape.stack, d, bias=True)
    if shape.family == "rns-rnn":
        return sympy.expand(gates * d * (vocabulary_size + reading + d + 2) + (d + 1) * vocabulary_size + stack)
    embedding_width = d + (reading if shape.reading_to_output else 0)
    total = (
        embedding_count(vocabulary_size, embedding_width, shape.syntax, f, feature_values)
        + shape.num_layers * d
        + gates * d * (embedding_width + reading + d + 1)
        + (shape.num_layers - 1) * gates * d * (2 * d + 1)
        + stack
    )
    return sympy.expand(total)


def is_feasible(shape: Shape, width: int, options: ModelOptions) -> bool:
    """Transformers: width divisible by the 4 heads (so even); +Syn: a token embedding remains."""
    if width < 1 or (shape.base == "transformer" and width % 4):
        return False
    if shape.syntax:
        extra = shape.stack.reading_size if shape.stack is not None and shape.reading_to_output else 0
        return width + extra - options.syntax_feature_width >= 1
    return True


def choose_width(shape: Shape, vocabulary_size: int, budget: int, options: ModelOptions, feature_values: int = 0) -> Sizing:
    """The feasible width whose count is nearest ``budget`` (ties: the smaller width)."""
    import sympy

    count = parameter_count(shape, vocabulary_size, options, feature_values)
    d = width_symbol()
    if shape.family == "rns-rnn":
        width = options.cfl_hidden_units
        return Sizing(width, int(count.subs(d, width)), count, None)
    polynomial = sympy.Poly(count - budget, d)
    roots = [float(sympy.re(root)) for root in polynomial.nroots() if abs(sympy.im(root)) < 1e-9 and sympy.re(root) > 0]
    if not roots:
        raise StacklmError(f"no positive width gives {budget} parameters (count {count})")
    root = roots[0]
    below = int(root)
    while below > 0 and not is_feasible(shape, below, options):
        below -= 1
    above = int(root) + 1
    while not is_feasible(shape, above, options):
        above += 1
    candidates = [width for width in (below, above) if width > 0]
    width = min(candidates, key=lambda w: (abs(int(count.subs(d, w)) - budget), w))
    return Sizing(width, int(count.subs(d, width)), count, root)
