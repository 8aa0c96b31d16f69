"""The one registry of architecture names: each maps to its config class, builder and path slug.

Bearing Syntactic Fruit (DuSell & Cotterell (2025) §5): transformers with 5 layers, 4 heads, FFN 2d, and a
stack-attention sublayer in layer 3 of 5 (one stack) or layers 2 and 4 (two); RNNs and LSTMs
with 3 layers; superposition stacks with m = 50 ("Sup"), dVPDAs with |Q| = |Γ| = 3, m = 5
("Nd"); "+R" short-circuits the reading to the output. Every such name also exists with
"+Syn" appended: the same model with a syntax-infused embedding (Sundararaman et al. (2019) §4, f = 20).

RNS-RNN CFL experiments (DuSell & Chiang (2022) §4, App. 8): a 1-layer LSTM controller with 20 units and
no stack ("LSTM"), a stratification stack ("Gref"), a superposition stack ("JM"), or the
nondeterministic stack, normalized or not (+U) and with or without states in the reading (+S).
Their registry names carry the prefix ``cfl/`` (``cfl/NS+S+U``), so that ``cfl/LSTM`` and the
Bearing ``LSTM`` stay distinct; ``Architecture.label`` is the name without it, as the tables
print it. Their stack sizes come from ``ModelOptions`` (``cfl_stack_vector_size``,
``cfl_num_states``, ``cfl_num_symbols``), since App. 8 varies them per task and search.
NS+U follows the paper (unnormalized, no states), not the released script
(``docs/design/cfl-and-ptb.md#nsu-follows-the-paper``).

Each width is sized to the parameter budget (``stacklm.models.sizing``); the CFL widths are fixed.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

import torch

from stacklm.errors import StacklmError
from stacklm.models.base import LanguageModel
from stacklm.models.cfl_names import CFL_PREFIX, CFL_STACKS, CflStack
from stacklm.models.embedding import FeatureTable
from stacklm.models.options import PARAMETER_BUDGET, ModelOptions
from stacklm.models.recurrent import RecurrentConfig, RecurrentLanguageModel
from stacklm.models.sizing import Shape, Sizing, choose_width
from stacklm.models.stack_interface import (
    NondeterministicSpec,
    StackSpec,
    StratificationSpec,
    SuperpositionSpec,
    VectorNondeterministicSpec,
)
from stacklm.models.transformer import Transformer, TransformerConfig

SYNTAX_SUFFIX = "+Syn"

ModelConfig = TransformerConfig | RecurrentConfig


@dataclass(frozen=True)
class Architecture:
    name: str  # registry key, e.g. "LSTM+Nd+R", "Tf+Syn", "cfl/NS+S+U"
    label: str  # as the papers' tables print it
    slug: str  # for paths and run names
    family: Literal["bearing-syntactic-fruit", "rns-rnn"]
    config_class: type[TransformerConfig] | type[RecurrentConfig]
    base: Literal["transformer", "rnn", "lstm"]
    stack: StackSpec | None = None  # Bearing: the stack of every stack layer or of the stack RNN
    stack_layers: int = 0  # transformers: 1 (layer 3 of 5) or 2 (layers 2 and 4)
    reading_to_output: bool = False  # +R
    syntax: bool = False  # +Syn
    cfl_stack: CflStack | None = None  # CFL: the stack, sized by the options

    @property
    def stack_name(self) -> str | None:
        """The stack's name in the papers' tables: ``Nd`` or ``Sup`` (Bearing), ``Gref`` … ``NS+S+U``
        (CFL); None without a stack."""
        if self.cfl_stack is not None:
            return self.cfl_stack
        return next((token for token, spec in BEARING_STACKS.items() if spec == self.stack), None)

    def shape(self, options: ModelOptions) -> Shape:
        """The structure of this architecture under ``options``."""
        if self.family == "rns-rnn":
            return Shape("lstm", "rns-rnn", stack=_cfl_stack(self.cfl_stack, options), num_layers=1)
        if self.base == "transformer":
            positions = {0: (), 1: (2,), 2: (1, 3)}[self.stack_layers]
            layers = tuple(self.stack if index in positions else None for index in range(5))
            return Shape("transformer", self.family, layers=layers, syntax=self.syntax)
        return Shape(
            self.base, self.family, stack=self.stack, reading_to_output=self.reading_to_output, syntax=self.syntax, num_layers=3
        )

    def sizing(
        self, vocabulary_size: int, options: ModelOptions, parameter_budget: int = PARAMETER_BUDGET, feature_values: int = 0
    ) -> Sizing:
        """The width nearest the budget (or the fixed CFL width) and its parameter count."""
        return choose_width(self.shape(options), vocabulary_size, parameter_budget, options, feature_values)

    def config(self, vocabulary_size: int, width: int, options: ModelOptions) -> ModelConfig:
        """The config of this architecture at ``width``."""
        shape = self.shape(options)
        syntax_width = options.syntax_feature_width if shape.syntax else None
        if shape.base == "transformer":
            return TransformerConfig(
                vocabulary_size=vocabulary_size,
                width=width,
                layers=shape.layers,
                dropout=options.dropout,
                syntax_feature_width=syntax_width,
                reference=options.reference,
            )
        cfl = shape.family == "rns-rnn"
        return RecurrentConfig(
            vocabulary_size=vocabulary_size,
            hidden_units=width,
            cell=shape.base,
            num_layers=shape.num_layers,
            stack=shape.stack,
            reading_to_output=shape.reading_to_output,
            dropout=0.0 if cfl else options.dropout,
            variant=shape.family,
            syntax_feature_width=syntax_width,
            reference=options.reference,
        )


def _cfl_stack(label: CflStack | None, options: ModelOptions) -> StackSpec | None:
    """The CFL stacks: Gref and JM with vector size m, the NS family with |Q| states and |Γ| symbols."""
    if label is None:
        return None
    if label == "Gref":
        return StratificationSpec(vector_size=options.cfl_stack_vector_size)
    if label == "JM":
        return SuperpositionSpec(vector_size=options.cfl_stack_vector_size)
    return NondeterministicSpec(
        num_states=options.cfl_num_states,
        num_symbols=options.cfl_num_symbols,
        normalized="+U" not in label,
        states_in_reading="+S" in label,
    )


BEARING_STACKS: dict[str, StackSpec] = {
    "Sup": SuperpositionSpec(vector_size=50),
    "Nd": VectorNondeterministicSpec(num_states=3, num_symbols=3, vector_size=5),
}


def _bearing_architectures() -> list[Architecture]:
    """Tf, Tf+Sup, Tf+Sup+Sup, Tf+Nd, Tf+Nd+Nd, RNN, RNN+Sup, RNN+Sup+R, …, LSTM+Nd+R; then each +Syn."""
    family: Literal["bearing-syntactic-fruit"] = "bearing-syntactic-fruit"
    recurrent_bases: tuple[tuple[Literal["rnn", "lstm"], str], ...] = (("rnn", "RNN"), ("lstm", "LSTM"))
    plain: list[Architecture] = [Architecture("Tf", "Tf", "tf", family, TransformerConfig, "transformer")]
    for token, spec in BEARING_STACKS.items():
        for count in (1, 2):
            name = "Tf" + f"+{token}" * count
            plain.append(Architecture(name, name, name.lower(), family, TransformerConfig, "transformer", spec, count))
    for base, label in recurrent_bases:
        plain.append(Architecture(label, label, label.lower(), family, RecurrentConfig, base))
        for token, spec in BEARING_STACKS.items():
            for reading_to_output in (False, True):
                name = f"{label}+{token}" + ("+R" if reading_to_output else "")
                plain.append(
                    Architecture(name, name, name.lower(), family, RecurrentConfig, base, spec, reading_to_output=reading_to_output)
                )
    syntax = [
        replace(a, name=a.name + SYNTAX_SUFFIX, label=a.label + SYNTAX_SUFFIX, slug=(a.name + SYNTAX_SUFFIX).lower(), syntax=True)
        for a in plain
    ]
    return plain + syntax


def _cfl_architectures() -> list[Architecture]:
    """cfl/LSTM, cfl/Gref, cfl/JM, cfl/NS, cfl/NS+S, cfl/NS+U, cfl/NS+S+U."""
    lstm = Architecture(CFL_PREFIX + "LSTM", "LSTM", "cfl-lstm", "rns-rnn", RecurrentConfig, "lstm")
    return [lstm] + [
        Architecture(CFL_PREFIX + label, label, "cfl-" + label.lower(), "rns-rnn", RecurrentConfig, "lstm", cfl_stack=label)
        for label in CFL_STACKS
    ]


ARCHITECTURES: dict[str, Architecture] = {a.name: a for a in _bearing_architectures() + _cfl_architectures()}


def get_architecture(name: str) -> Architecture:
    try:
        return ARCHITECTURES[name]
    except KeyError:
        raise StacklmError(f"unknown architecture {name!r}; known: {', '.join(ARCHITECTURES)}") from None


def model_for_config(config: ModelConfig, token_features: FeatureTable | None = None) -> LanguageModel:
    """The (uninitialised) model of ``config``."""
    if isinstance(config, TransformerConfig):
        return Transformer(config, token_features)
    return RecurrentLanguageModel(config, token_features)


def build_model(
    name: str,
    vocabulary_size: int,
    *,
    parameter_budget: int = PARAMETER_BUDGET,
    token_features: FeatureTable | None = None,
    options: ModelOptions | None = None,
    generator: torch.Generator | None = None,
) -> LanguageModel:
    """The architecture ``name`` for V = ``vocabulary_size`` symbols (EOS included), initialised.

    The width is the one nearest ``parameter_budget`` unless ``options.width`` sets it. "+Syn"
    architectures need ``token_features`` (one row per symbol); the others ignore it.
    ``generator`` defaults to torch's global generator.
    """
    architecture = get_architecture(name)
    options = options or ModelOptions()
    features = token_features if architecture.syntax else None
    if architecture.syntax:
        if features is None:
            raise StacklmError(f"{name} needs token features (a FeatureTable from the task's lexicon)")
        if features.num_symbols != vocabulary_size:
            raise StacklmError(f"the feature table has {features.num_symbols} symbols, the vocabulary {vocabulary_size}")
    if options.width is not None:
        width = options.width
    else:
        width = architecture.sizing(vocabulary_size, options, parameter_budget, features.value_count if features else 0).width
    model = model_for_config(architecture.config(vocabulary_size, width, options), features)
    model.initialize(generator if generator is not None else torch.default_generator)
    return model
