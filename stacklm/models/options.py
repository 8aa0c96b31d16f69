"""Options every architecture shares, and the one place that lists where the reference departs.

The numbers of DuSell & Cotterell (2025), *Bearing Syntactic Fruit with Stack-Augmented Neural
Networks*, were computed by its authors' code (rau @ 1b80c20; ``docs/design/authors-code.md``),
so that code is the default. It departs from the paper's text in two ways that change a model;
each is a named option of ``ReferenceBehaviour``, so a user can reproduce either (an independent
check found our models equal to the authors' to 2.6e-14 in logits only with the defaults):

``pushed_vector`` — the vector a stack-attention sublayer pushes (paper App. C.4).
  - ``"raw"`` (default, the authors' code): the superposition sublayer pushes W_v x̄_t^LN
    unbounded; the nondeterministic sublayer treats W_v x̄_t^LN as a log vector, i.e. pushes
    exp(W_v x̄_t^LN) ∈ (0, ∞)^m.
  - ``"sigmoid"`` (the paper's text): v_t = σ(W_v x̄_t^LN) ∈ (0, 1)^m for both stacks. On equal
    parameters the stack sublayer then starts at a much smaller share of the residual stream
    and its layers receive several times smaller gradients.
  Stack RNNs use σ either way (paper §4.1 and the code agree).

``initialization`` — which layers get Xavier-uniform weights (paper App. D).
  - ``"reference"`` (default, the authors' code): as ``"paper"`` below, but the feed-forward
    layers of *standard* transformer layers and the action and pushed-vector layers of the
    nondeterministic stack RNNs (plain ``nn.Linear`` in rau) are U(−0.1, 0.1) instead of Xavier.
  - ``"paper"`` (the paper's text): every fully connected layer is Xavier-uniform (gain of its activation: tanh 5/3,
    ReLU √2, otherwise 1; bias 0), except the recurrent updates of RNNs/LSTMs and the projections
    of standard scaled dot-product attention, which are U(−0.1, 0.1) like embeddings and learned
    initial states; layer norms start at weight 1, bias 0.

The CFL models of the RNS-RNN paper follow its code's initialisation
(``docs/design/cfl-and-ptb.md#cfl-training``), which that paper adopts by reference ("as in our
earlier paper"); these options do not apply.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal


PushedVector = Literal["sigmoid", "raw"]
Initialization = Literal["paper", "reference"]
DROPOUT = 0.1  # Bearing models only; App. D: "wherever dropout is applicable"
PARAMETER_BUDGET = 200_000  # every Bearing model is sized to about this many parameters (DuSell & Cotterell (2025) §5)


@dataclass(frozen=True)
class ReferenceBehaviour:
    """Which of the paper's text or its authors' code to follow where they differ (default: the code)."""

    pushed_vector: PushedVector = "raw"
    initialization: Initialization = "reference"


@dataclass(frozen=True)
class ModelOptions:
    """Everything ``build_model`` needs besides the name, vocabulary, budget and lexicon.

    The Bearing Syntactic Fruit settings (dropout 0.1, m = 50, |Q| = |Γ| = 3, m = 5, f = 20) are
    fixed by the registry; the fields below are the ones a run may vary.
    """

    dropout: float = DROPOUT
    syntax_feature_width: int = 20  # f of the +Syn embedding (Sundararaman et al. (2019) §5: 20 by grid search)
    reference: ReferenceBehaviour = field(default_factory=ReferenceBehaviour)
    width: int | None = None  # overrides the width sized to the budget (tests, ablations)
    # CFL models (RNS-RNN App. 8): controller units, Gref/JM vector size, NS PDA sizes.
    cfl_hidden_units: int = 20
    cfl_stack_vector_size: int = 20  # searched over {2, 20, 40}
    cfl_num_states: int = 2  # 2 for marked/unmarked reversal and Dyck, 3 for padded reversal and hardest CFL
    cfl_num_symbols: int = 3

    def __post_init__(self) -> None:
        if not 0 <= self.dropout < 1:
            raise ValueError(f"dropout must lie in [0, 1), got {self.dropout}")
        for name in ("syntax_feature_width", "cfl_hidden_units", "cfl_stack_vector_size", "cfl_num_states", "cfl_num_symbols"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.width is not None and self.width < 1:
            raise ValueError(f"width must be positive, got {self.width}")


@dataclass(frozen=True)
class ModelSettings:
    """The ``model`` section of the settings: what of ``ModelOptions`` a run of the workflow
    sets (the other fields follow from the architecture and the language)."""

    dropout: float = DROPOUT
    reference: ReferenceBehaviour = field(default_factory=ReferenceBehaviour)

    def options(self) -> ModelOptions:
        return ModelOptions(dropout=self.dropout, reference=self.reference)
