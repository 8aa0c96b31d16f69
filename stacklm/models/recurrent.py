"""Simple RNN and LSTM language models, with or without a stack (DuSell & Cotterell (2025) §4.1, App. C.1–C.2;
DuSell & Chiang (2022) §2.1).

L layers; h^(0)_t = x'_t = Dropout(x_t) and, for layer ℓ,

    RNN:  h^(ℓ)_t = tanh(W^(ℓ) [h̸^(ℓ−1)_t ; h^(ℓ)_{t−1}] + b^(ℓ))
    LSTM: i, f, g, o = σ, σ, tanh, σ of W^(ℓ)_{i,f,g,o} [h̸^(ℓ−1)_t ; h^(ℓ)_{t−1}] + b^(ℓ)_{i,f,g,o},
          c^(ℓ)_t = f ⊙ c^(ℓ)_{t−1} + i ⊙ g,   h^(ℓ)_t = o ⊙ tanh(c^(ℓ)_t),

with h̸^(ℓ)_t = Dropout(h^(ℓ)_t) between layers, and y_t = Ẽ Dropout(h^(L)_t) for t = 0 … n.

Stack RNN: the stack reading enters layer 1 beside the token, [x'_t ; r_{t−1}]; the actions
come from the top layer's h^(L)_t (not dropped out), and r_t is the reading after them. With
``reading_to_output`` (+R, DuSell & Cotterell (2025) §4.1) y_t = Ẽ Dropout([h^(L)_t ; r_t]) and the embedding
width is d + |r|; r_0 is the reading of the empty stack. Without +R the actions of h_t are
only needed at step t + 1, so the stack is updated lazily there: n − 1 updates for n tokens
(n with +R), as in the reference.

A step's products: the token's columns of W^(1) x'_t are batched over time; then one product
per layer, W^(1) over [r_{t−1} ; h^(1)_{t−1}], W^(ℓ) over [h̸^(ℓ−1)_t ; h^(ℓ)_{t−1}] for ℓ > 1, and
one for all of the stack's action layers from h^(L)_t, their weights joined once per forward
(``StepWeights``). The whole-sequence forward draws the dropout masks of h̸^(ℓ)_t for all steps at
once. ``stacklm.kernels.recurrent`` runs a stack RNN's whole-sequence forward on compiled CPU kernels.

Two variants share this module:

- ``bearing-syntactic-fruit`` (DuSell & Cotterell (2025)): tied embeddings (plain or +Syn), learned initial
  states h^(ℓ)_0 = tanh(w^(ℓ)_0), c_0 = 0, one bias per gate, dropout as above;
- ``rns-rnn`` (DuSell & Chiang (2022) §2.1, ``docs/design/cfl-and-ptb.md#rns-rnn-models``): one-hot inputs, h_0 = c_0 = 0,
  PyTorch's two bias vectors per gate, an affine output layer with bias, no dropout.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from stacklm.models.base import LanguageModel, Layers, ModelState, uniform_, xavier_
from stacklm.models.dropout import Dropout
from stacklm.models.embedding import FeatureTable, TiedEmbedding
from stacklm.models.options import ReferenceBehaviour
from stacklm.models.stack_interface import StackSpec, build_interface
from stacklm.stacks.base import StackState

Variant = Literal["bearing-syntactic-fruit", "rns-rnn"]


@dataclass(frozen=True)
class RecurrentConfig:
    vocabulary_size: int  # V, EOS included (last)
    hidden_units: int  # d
    cell: Literal["rnn", "lstm"] = "lstm"
    num_layers: int = 3
    stack: StackSpec | None = None
    reading_to_output: bool = False  # +R
    dropout: float = 0.1
    variant: Variant = "bearing-syntactic-fruit"
    syntax_feature_width: int | None = None  # f of the +Syn embedding; None = plain embedding
    reference: ReferenceBehaviour = field(default_factory=ReferenceBehaviour)

    def __post_init__(self) -> None:
        if self.reading_to_output and self.stack is None:
            raise ValueError("reading_to_output needs a stack")
        if self.variant == "rns-rnn" and (self.syntax_feature_width is not None or self.reading_to_output or self.dropout):
            raise ValueError("the rns-rnn variant has one-hot inputs, no +R and no dropout")

    @property
    def reading_size(self) -> int:
        return 0 if self.stack is None else self.stack.reading_size

    @property
    def output_width(self) -> int:
        """Width of y'_t and of the tied embedding: d, or d + |r| with +R."""
        return self.hidden_units + (self.reading_size if self.reading_to_output else 0)


class RecurrentLayer(nn.Module):
    """One RNN or LSTM layer; its input projection is separate so it can be batched over time."""

    def __init__(self, input_size: int, hidden_units: int, cell: Literal["rnn", "lstm"], recurrent_bias: bool) -> None:
        super().__init__()
        self.cell = cell
        gates = 4 if cell == "lstm" else 1
        self.input_weight = nn.Parameter(torch.empty(gates * hidden_units, input_size))  # W^(ℓ), input columns
        self.recurrent_weight = nn.Parameter(torch.empty(gates * hidden_units, hidden_units))  # W^(ℓ), h_{t−1} columns
        self.bias = nn.Parameter(torch.empty(gates * hidden_units))
        self.recurrent_bias = nn.Parameter(torch.empty(gates * hidden_units)) if recurrent_bias else None

    def project(self, x: Tensor, columns: slice = slice(None)) -> Tensor:
        """W^(ℓ) x + biases over the input columns ``columns``: (…, gates · d)."""
        # A slice of the weight costs its backward a zero-filled copy of the whole weight.
        weight = self.input_weight if columns == slice(None) else self.input_weight[:, columns]
        projected = F.linear(x, weight, self.bias)
        return projected if self.recurrent_bias is None else projected + self.recurrent_bias

    def step_weight(self, input_columns: slice | None) -> Tensor:
        """W^(ℓ)ᵀ over the input columns ``input_columns`` and h_{t−1}, for [x_t ; h_{t−1}]: (columns + d,
        gates · d); None: over h_{t−1} alone. Made once per forward, sliced and joined once."""
        if input_columns is None:
            return self.recurrent_weight.t()
        # A slice of the weight costs its backward a zero-filled copy of the whole weight.
        input_weight = self.input_weight if input_columns == slice(None) else self.input_weight[:, input_columns]
        return torch.cat([input_weight, self.recurrent_weight], dim=1).t()

    def biases(self) -> Tensor:
        """b^(ℓ), and PyTorch's second bias where there is one: (gates · d,)."""
        return self.bias if self.recurrent_bias is None else self.bias + self.recurrent_bias

    def step(self, gates: Tensor, cell: Tensor | None) -> tuple[Tensor, Tensor | None]:
        """h_t (and c_t) from the gates' pre-activations W^(ℓ) [x_t ; h_{t−1}] + b (B, gates · d) and c_{t−1} (B, d)."""
        if self.cell == "rnn":
            return torch.tanh(gates), None
        assert cell is not None
        input_gate, forget_gate, candidate, output_gate = gates.chunk(4, dim=-1)  # (B, d) each
        cell = torch.sigmoid(forget_gate) * cell + torch.sigmoid(input_gate) * torch.tanh(candidate)
        return torch.sigmoid(output_gate) * torch.tanh(cell), cell

    def initialize(self, generator: torch.Generator) -> None:
        for parameter in self.parameters():
            uniform_(parameter, generator)


class RecurrentLanguageModel(LanguageModel):
    def __init__(self, config: RecurrentConfig, features: FeatureTable | None = None) -> None:
        super().__init__()
        if (features is None) != (config.syntax_feature_width is None):
            raise ValueError("a feature table is needed exactly when syntax_feature_width is set")
        self.config = config
        self.vocabulary_size = config.vocabulary_size
        hidden = config.hidden_units
        bearing = config.variant == "bearing-syntactic-fruit"
        self.token_width = config.output_width if bearing else config.vocabulary_size
        self.embedding = (
            TiedEmbedding(config.vocabulary_size, config.output_width, features, config.syntax_feature_width or 0)
            if bearing
            else None
        )
        self.output_layer = None if bearing else nn.Linear(hidden, config.vocabulary_size)
        self.initial_hidden = nn.Parameter(torch.empty(config.num_layers, hidden)) if bearing else None  # w^(ℓ)_0
        self.layers = Layers(
            RecurrentLayer(
                (self.token_width + config.reading_size) if index == 0 else hidden,
                hidden,
                config.cell,
                recurrent_bias=not bearing,
            )
            for index in range(config.num_layers)
        )
        self.interface = None
        if config.stack is not None:
            # Nondeterministic action layers: Xavier in the Bearing paper; U(−0.1, 0.1) in the authors'
            # code of both papers (docs/design/authors-code.md#initialization,
            # docs/design/cfl-and-ptb.md#cfl-training).
            xavier = bearing and config.reference.initialization == "paper"
            self.interface = build_interface(config.stack, hidden, bias=True, xavier=xavier)
        self.dropout = Dropout(config.dropout)

    def _tokens(self, tokens: Tensor) -> Tensor:
        """x'_t: tied embeddings with dropout, or one-hot vectors: (…, token_width).

        The one-hot vectors are scattered into zeros: ``F.one_hot`` checks the indices' range by
        reading their minimum and maximum back to the host, a scalar read in every step."""
        if self.embedding is None:
            zeros = torch.zeros(*tokens.shape, self.vocabulary_size, dtype=self.layers[0].input_weight.dtype, device=tokens.device)
            return zeros.scatter_(-1, tokens.unsqueeze(-1), 1.0)  # (…, V)
        return self.dropout(self.embedding(tokens))

    def _logits(self, output: Tensor) -> Tensor:
        """y_t from y'_t before dropout (…, output width): (…, V)."""
        if self.embedding is None:
            assert self.output_layer is not None
            return self.output_layer(output)
        return self.embedding.logits(self.dropout(output), self.vocabulary_size)

    def _initial(self, batch_size: int, max_steps: int | None) -> RecurrentState:
        """The state before any token; ``max_steps``: the stack updates of one whole-sequence forward, if that is its use."""
        hidden, cells = self._initial_layers(batch_size)
        stack = None
        if self.interface is not None:
            stack = self.interface.initial_state(batch_size, self.layers[0].input_weight, max_steps)
        return RecurrentState(self, hidden, cells, stack, pending=False)

    def _initial_layers(self, batch_size: int) -> tuple[tuple[Tensor, ...], tuple[Tensor, ...]]:
        """h^(ℓ)_0 per layer (B, d), and c^(ℓ)_0 (LSTM) or ()."""
        like = self.layers[0].input_weight
        hidden_units = self.config.hidden_units
        if self.initial_hidden is None:
            hidden = tuple(like.new_zeros(batch_size, hidden_units) for _ in self.layers)
        else:
            hidden = tuple(torch.tanh(w).expand(batch_size, hidden_units) for w in self.initial_hidden)
        cells = tuple(like.new_zeros(batch_size, hidden_units) for _ in self.layers) if self.config.cell == "lstm" else ()
        return hidden, cells

    def initial_state(self, batch_size: int) -> RecurrentState:
        return self._initial(batch_size, None)

    def forward(self, tokens: Tensor) -> Tensor:
        if self.interface is None:
            return self._forward_layerwise(tokens)
        updates, projected, weights, masks = self._sequence_start(tokens)
        state = self._initial(tokens.size(0), updates or None)
        step_masks = [None] * tokens.size(1) if masks is None else masks.unbind(0)
        outputs = [state.pre_output()]
        for projected_token, step_mask in zip(projected.unbind(1), step_masks):  # unbind: one backward for all steps
            state = state.advance(projected_token, weights, step_mask)
            outputs.append(state.pre_output())
        return self._logits(torch.stack(outputs, dim=1))  # (B, n + 1, V)

    def _sequence_start(self, tokens: Tensor) -> tuple[int, Tensor, StepWeights, Tensor | None]:
        """What a whole-sequence forward of a stack RNN starts from: the number of steps whose
        h^(L)_t drives the stack (n with +R, else n − 1), W^(1)'s token columns and biases applied
        to every x'_t (B, n, gates · d), the steps' weights joined once, and the dropout masks of
        all steps drawn at once (n, L − 1, B, d)."""
        batch_size, length = tokens.shape
        updates = length if self.config.reading_to_output else max(length - 1, 0)
        projected = self.layers[0].project(self._tokens(tokens), slice(0, self.token_width))
        return updates, projected, self._step_weights(), self._dropout_masks(length, batch_size)

    def _forward_layerwise(self, tokens: Tensor) -> Tensor:
        """Without a stack, each layer runs over the whole sequence before the next starts."""
        initial = self._initial(tokens.size(0), None)
        x = self._tokens(tokens)  # (B, n, token_width)
        top_initial = initial.hidden[-1]
        for index, layer in enumerate(self.layers):
            if index > 0:
                x = self.dropout(x)
            projected = layer.project(x)  # (B, n, gates · d), one matmul for all steps
            recurrent_weight = layer.step_weight(None)  # (d, gates · d)
            hidden, cell = initial.hidden[index], initial.cells[index] if initial.cells else None
            outputs = []
            for projected_token in projected.unbind(1):  # one backward for all steps, not one per index
                hidden, cell = layer.step(torch.addmm(projected_token, hidden, recurrent_weight), cell)
                outputs.append(hidden)
            x = torch.stack(outputs, dim=1) if outputs else projected.new_zeros(tokens.size(0), 0, self.config.hidden_units)
        return self._logits(torch.cat([top_initial.unsqueeze(1), x], dim=1))  # (B, n + 1, V)

    def _dropout_masks(self, length: int, batch_size: int) -> Tensor | None:
        """Dropout's scaled masks (0 or 1/(1 − p)) of h̸^(ℓ)_t, ℓ < L, for n steps: (n, L − 1, B, d);
        None where dropout is the identity."""
        if not self.training or self.dropout.p == 0 or len(self.layers) == 1:
            return None
        like = self.layers[0].input_weight
        return self.dropout(like.new_ones(length, len(self.layers) - 1, batch_size, self.config.hidden_units))

    def _step_weights(self) -> StepWeights:
        """The weights of a step's products (module docstring), for the steps of one forward."""
        reading_columns = None if self.interface is None else slice(self.token_width, None)
        layers = tuple(
            layer.step_weight(reading_columns if index == 0 else slice(None)) for index, layer in enumerate(self.layers)
        )
        biases = tuple(layer.biases() for layer in self.layers[1:])
        actions = None if self.interface is None else self.interface.input_weight()
        return StepWeights(layers, biases, actions)

    def initialize(self, generator: torch.Generator) -> None:
        if self.embedding is not None:
            self.embedding.initialize(generator)
        if self.output_layer is not None:
            xavier_(self.output_layer, 1.0, generator)
        if self.initial_hidden is not None:
            uniform_(self.initial_hidden, generator)
        for layer in self.layers:
            layer.initialize(generator)
        if self.interface is not None:
            self.interface.initialize(generator)


@dataclass(frozen=True)
class StepWeights:
    """One forward's weights of a step's products: W^(1)ᵀ over [r_{t−1} ; h^(1)_{t−1}] (h^(1)_{t−1}
    alone without a stack; the token's columns and the biases come with x'_t's projection), W^(ℓ)ᵀ
    over [h̸^(ℓ−1)_t ; h^(ℓ)_{t−1}] and b^(ℓ) for ℓ > 1, and the stack's action layers joined."""

    layers: tuple[Tensor, ...]  # W^(ℓ)ᵀ (inputs, gates · d)
    biases: tuple[Tensor, ...]  # b^(ℓ) for ℓ = 2 … L, (gates · d,)
    actions: tuple[Tensor, Tensor | None] | None  # the interface's ``input_weight()``


@dataclass(frozen=True)
class RecurrentState(ModelState):
    model: RecurrentLanguageModel
    hidden: tuple[Tensor, ...]  # h^(ℓ)_t per layer, (B, d)
    cells: tuple[Tensor, ...]  # c^(ℓ)_t per layer (LSTM), else ()
    stack: StackState[Any] | None  # +R: after the actions of h_t; else: before them
    pending: bool  # without +R: the actions of h_t are still to be applied

    def advance(
        self, projected: Tensor, weights: StepWeights | None = None, dropout_masks: Tensor | None = None
    ) -> RecurrentState:
        """The state after a token whose layer-1 input projection is ``projected`` (B, gates · d);
        ``weights``: the model's ``_step_weights()``, when the caller has them already;
        ``dropout_masks``: the masks of h̸^(ℓ)_t (L − 1, B, d) (``_dropout_masks``), else drawn here."""
        model = self.model
        weights = model._step_weights() if weights is None else weights
        stack = self.stack
        if stack is not None and self.pending:
            stack = stack.next(self._actions(weights, self.hidden[-1]))
        hidden: list[Tensor] = []
        cells: list[Tensor] = []
        for index, layer in enumerate(model.layers):
            if index == 0:
                layer_input = self.hidden[0] if stack is None else torch.cat([stack.reading(), self.hidden[0]], dim=-1)
                gates = torch.addmm(projected, layer_input, weights.layers[0])  # (B, gates · d)
            else:
                dropped = model.dropout(hidden[-1]) if dropout_masks is None else hidden[-1] * dropout_masks[index - 1]
                layer_input = torch.cat([dropped, self.hidden[index]], dim=-1)  # (B, 2d)
                gates = torch.addmm(weights.biases[index - 1], layer_input, weights.layers[index])
            new_hidden, new_cell = layer.step(gates, self.cells[index] if self.cells else None)
            hidden.append(new_hidden)
            if new_cell is not None:
                cells.append(new_cell)
        reading_to_output = model.config.reading_to_output
        if stack is not None and reading_to_output:
            stack = stack.next(self._actions(weights, hidden[-1]))
        return RecurrentState(model, tuple(hidden), tuple(cells), stack, pending=stack is not None and not reading_to_output)

    def _actions(self, weights: StepWeights, top_hidden: Tensor) -> Any:
        """The stack's actions from h^(L) (B, d), in one product for all action layers."""
        interface = self.model.interface
        assert interface is not None and weights.actions is not None
        return interface.actions_from_logits(F.linear(top_hidden, *weights.actions))

    def pre_output(self) -> Tensor:
        """y'_t before dropout: h^(L)_t, or [h^(L)_t ; r_t] with +R: (B, output width)."""
        if self.model.config.reading_to_output:
            assert self.stack is not None
            return torch.cat([self.hidden[-1], self.stack.reading()], dim=-1)
        return self.hidden[-1]

    def output(self) -> Tensor:
        return self.model._logits(self.pre_output())

    def next(self, tokens: Tensor) -> RecurrentState:
        model = self.model
        return self.advance(model.layers[0].project(model._tokens(tokens), slice(0, model.token_width)))

    def transform_tensors(self, function: Callable[[Tensor], Tensor]) -> RecurrentState:
        return dataclasses.replace(
            self,
            hidden=tuple(function(h) for h in self.hidden),
            cells=tuple(function(c) for c in self.cells),
            stack=None if self.stack is None else self.stack.transform_tensors(function),
        )

    def batch_size(self) -> int:
        return self.hidden[0].size(0)
