"""The PTB models: parameter counts against docs/design/cfl-and-ptb.md#ptb-models-and-parameter-counts,
the first stack reading from the paper's equations, truncated BPTT's carried state, the window,
initialization."""

import pytest
import torch

from stacklm.models.ptb import LimitedNondeterministic, PtbLanguageModel, PtbModelConfig, Superposition
from stacklm.stacks.nondeterministic import NondeterministicStack

NS_COUNTS = {
    (1, 2): 5_660_954, (1, 3): 5_664_805, (1, 4): 5_669_684, (1, 5): 5_675_591, (1, 6): 5_682_526, (1, 7): 5_690_489,
    (1, 11): 5_732_621, (2, 2): 5_668_664, (2, 3): 5_680_996, (2, 4): 5_697_440, (2, 5): 5_717_996, (3, 2): 5_681_514,
    (3, 3): 5_707_981, (3, 4): 5_743_700, (4, 3): 5_745_760,
}  # fmt: skip
RNS_COUNTS = {
    (2, 2): 5_670_712, (2, 3): 5_684_068, (2, 4): 5_701_536, (2, 5): 5_723_116, (3, 2): 5_685_610, (3, 3): 5_714_125,
    (3, 4): 5_751_892, (4, 3): 5_754_976,
}  # fmt: skip
CONFIGURATIONS = (
    [(PtbModelConfig(hidden_units=h), count) for h, count in ((256, 5_656_336), (258, 5_704_576), (267, 5_922_448))]
    + [(PtbModelConfig(hidden_units=247, stack=Superposition("hidden", 247)), 5_684_828)]
    + [(PtbModelConfig(hidden_units=256, stack=Superposition("learned", 22)), 5_685_289)]
    + [(PtbModelConfig(stack=LimitedNondeterministic(q, s, renormalizing=False)), count) for (q, s), count in NS_COUNTS.items()]
    + [(PtbModelConfig(stack=LimitedNondeterministic(q, s, renormalizing=True)), count) for (q, s), count in RNS_COUNTS.items()]
    + [(PtbModelConfig(stack=LimitedNondeterministic(1, s, renormalizing=True)), NS_COUNTS[1, s]) for s in (2, 3, 11)]
)


@pytest.mark.parametrize(("config", "count"), CONFIGURATIONS)
def test_parameter_counts_are_the_specs(config: PtbModelConfig, count: int) -> None:
    assert config.parameter_count() == count
    assert sum(parameter.numel() for parameter in PtbLanguageModel(config).parameters()) == count


def small(stack: LimitedNondeterministic | Superposition | None, seed: int = 0) -> PtbLanguageModel:
    model = PtbLanguageModel(PtbModelConfig(vocabulary_size=7, hidden_units=5, stack=stack)).double()
    model.initialize(torch.Generator().manual_seed(seed))
    return model


@pytest.mark.parametrize("renormalizing", [False, True])
def test_the_first_reading_is_the_normalized_push_from_q0_bottom(renormalizing: bool) -> None:
    # r_0 is one-hot at ⊥ (NS) or (q0, ⊥) (RNS). The first action is necessarily a push from
    # (q0, ⊥), so α[1][r, y] ∝ Δ⁺[q0, ⊥ → r, y], and the reading renormalizes it: over (r, y)
    # for RNS, summed over r for NS (the per-(q, x) softmax of NS cancels in the ratio).
    spec = LimitedNondeterministic(2, 3, renormalizing=renormalizing, window=4)
    model = small(spec)
    state = model.initial_state(2)
    assert state.reading.tolist() == [[1.0] + [0.0] * (spec.reading_size - 1)] * 2
    inputs = torch.tensor([[3], [5]])
    _, after = model(inputs, state)
    hidden, _ = model.cell(torch.cat([model.embedding(inputs[:, 0]), state.reading], dim=-1), (state.hidden, state.cell))
    logits = model.action_layer(hidden).view(2, 2, 3, 2 * 6 + 2)[:, 0, 0, :6].view(2, 2, 3)  # push from (q0, ⊥): (B, r, y)
    weights = logits.exp()
    expected = (weights / weights.sum(dim=(1, 2), keepdim=True)).flatten(1) if renormalizing else weights.sum(1) / weights.sum(dim=(1, 2)).unsqueeze(-1)
    torch.testing.assert_close(after.reading, expected)


@pytest.mark.parametrize(
    "stack", [None, LimitedNondeterministic(2, 2, renormalizing=True, window=3), LimitedNondeterministic(1, 3, renormalizing=False, window=3), Superposition("learned", 4, max_depth=3), Superposition("hidden", 5)]
)
def test_chunks_with_the_carried_state_equal_one_pass(stack: LimitedNondeterministic | Superposition | None) -> None:
    model = small(stack)
    inputs = torch.randint(0, 7, (3, 12), generator=torch.Generator().manual_seed(1))
    whole, _ = model(inputs, model.initial_state(3))
    first, state = model(inputs[:, :5], model.initial_state(3))
    second, _ = model(inputs[:, 5:], state.detach())
    torch.testing.assert_close(torch.cat([first, second], dim=1), whole)
    # After the short stream ends, the first rows carry on alone.
    rest, _ = model(inputs[:2, 5:], state.detach().first_rows(2))
    torch.testing.assert_close(rest, whole[:2, 5:])


def test_a_window_at_least_the_length_changes_nothing_and_a_short_one_does() -> None:
    inputs = torch.randint(0, 7, (2, 10), generator=torch.Generator().manual_seed(2))
    wide = small(LimitedNondeterministic(2, 2, renormalizing=True, window=10))
    full = small(LimitedNondeterministic(2, 2, renormalizing=True, window=10))
    full.stack = NondeterministicStack(2, 2, states_in_reading=True, window=None)
    narrow = small(LimitedNondeterministic(2, 2, renormalizing=True, window=2))
    reference, _ = full(inputs, full.initial_state(2))
    torch.testing.assert_close(wide(inputs, wide.initial_state(2))[0], reference)
    assert not torch.allclose(narrow(inputs, narrow.initial_state(2))[0], reference)


def test_every_parameter_is_drawn_from_u_minus_to_plus_0_05() -> None:
    model = small(LimitedNondeterministic(2, 3, renormalizing=True))
    values = torch.cat([parameter.detach().flatten() for parameter in model.parameters()])
    assert values.abs().max() <= 0.05 and values.abs().max() > 0.045 and abs(float(values.mean())) < 0.01
