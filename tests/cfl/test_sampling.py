"""Length-conditioned sampling: valid lengths, exactness of the sampled distribution, determinism."""

import hashlib
import math
import random
from collections import Counter

import pytest

from stacklm.cfl.inside import length_table
from stacklm.cfl.languages import LANGUAGES
from stacklm.cfl.sampling import Choice, LengthSampler
from stacklm.errors import StacklmError

# docs/design/cfl-and-ptb.md#length-conditioned-sampling, table of valid lengths: (lengths in [40, 80], lengths in [40, 100])
SPEC_VALID_LENGTHS = {
    "marked-reversal": (range(41, 80, 2), range(41, 100, 2)),
    "unmarked-reversal": (range(40, 81, 2), range(40, 101, 2)),
    "padded-reversal": (range(40, 81), range(40, 101)),
    "dyck-2": (range(40, 81, 2), range(40, 101, 2)),
    "hardest-cfl": (range(40, 81), range(40, 101)),
}


@pytest.fixture(scope="module")
def samplers() -> dict[str, LengthSampler]:
    return {name: LengthSampler.build(language.grammar, 100) for name, language in LANGUAGES.items()}


@pytest.mark.parametrize("name", sorted(SPEC_VALID_LENGTHS))
def test_valid_lengths_are_those_of_the_spec(name, samplers):
    train, test = SPEC_VALID_LENGTHS[name]
    assert samplers[name].valid_lengths(40, 80) == tuple(train)
    assert samplers[name].valid_lengths(40, 100) == tuple(test)
    assert len(train) == {"marked-reversal": 20, "unmarked-reversal": 21, "padded-reversal": 41, "dyck-2": 21, "hardest-cfl": 41}[name]


def test_log_total_is_the_length_table_of_the_start_symbol(samplers):
    sampler = samplers["dyck-2"]
    table = length_table(sampler.circuit, 100)[sampler.circuit.start]
    assert [sampler.log_total(length) for length in range(101)] == table.tolist()
    # Dyck-2 at ℓ = 2: S → T → ( ) or [ ], each (1/2)(1/80)
    assert sampler.log_total(2) == pytest.approx(math.log(2 * 0.5 / 80))


def chi_square_critical_value(degrees: int, z: float = 4.75) -> float:
    """The upper-tail point of χ²(degrees) at P ≈ 1e-6 (z = 4.75), by the Wilson–Hilferty approximation."""
    return degrees * (1 - 2 / (9 * degrees) + z * math.sqrt(2 / (9 * degrees))) ** 3


def chi_square(counts: Counter, probabilities: dict[tuple[int, ...], float], samples: int) -> float:
    return sum((counts[w] - samples * p) ** 2 / (samples * p) for w, p in probabilities.items())


@pytest.mark.parametrize("name, length", [("dyck-2", 4), ("padded-reversal", 6), ("hardest-cfl", 7)])
def test_samples_follow_the_length_conditioned_distribution(name, length, samplers, derivations):
    """4,000 samples against p_G(w | ℓ) from enumerating derivations (no sample falls outside it).

    The χ² statistic (df = #strings − 1, every expected count ≥ 5 here) must stay below its
    1e-6 upper-tail point, while the same samples must reject a slightly wrong distribution:
    one in which a most likely string gives half of its probability to a least likely one.
    """
    samples = 4000
    grammar = LANGUAGES[name].grammar
    weights = derivations(grammar, length)
    total = math.fsum(weights.values())
    probabilities = {w: p / total for w, p in weights.items()}
    assert samples * min(probabilities.values()) >= 5
    generator = random.Random(1)
    counts = Counter(tuple(samplers[name].sample(length, generator)) for _ in range(samples))
    assert set(counts) <= set(probabilities)
    critical = chi_square_critical_value(len(probabilities) - 1)
    assert chi_square(counts, probabilities, samples) < critical
    ranked = sorted(probabilities, key=probabilities.get)
    least, most = ranked[0], ranked[-1]
    wrong = dict(probabilities)
    wrong[most], wrong[least] = probabilities[most] / 2, probabilities[least] + probabilities[most] / 2
    assert chi_square(counts, wrong, samples) > critical


def test_a_length_independent_sampler_would_fail_the_check(samplers, derivations):
    """The check above has power: drawing dyck-2 strings uniformly over the language fails it."""
    weights = derivations(LANGUAGES["dyck-2"].grammar, 4)
    total = math.fsum(weights.values())
    probabilities = {w: p / total for w, p in weights.items()}
    generator = random.Random(1)
    strings = sorted(probabilities)
    counts = Counter(strings[generator.randrange(len(strings))] for _ in range(4000))
    assert chi_square(counts, probabilities, 4000) > chi_square_critical_value(len(strings) - 1)


@pytest.mark.parametrize("name", sorted(LANGUAGES))
def test_long_samples_have_the_length_and_are_in_the_language(name, samplers):
    sampler = samplers[name]
    generator = random.Random(7)
    for length in sampler.valid_lengths(90, 100)[:3]:
        string = sampler.sample(length, generator)
        assert len(string) == length and all(0 <= a < LANGUAGES[name].num_terminals for a in string)
    if name == "marked-reversal":
        assert string == string[::-1] and string[len(string) // 2] == 2 and string.count(2) == 1
    if name == "dyck-2":
        depth = 0
        for a in string:
            depth += 1 if a in (0, 2) else -1
            assert depth >= 0
        assert depth == 0


def test_same_seed_same_strings_different_seed_different_strings(samplers):
    sampler = samplers["hardest-cfl"]

    def draw(seed: int) -> list[list[int]]:
        generator = random.Random(seed)
        return [sampler.sample(length, generator) for length in (40, 41, 77) for _ in range(5)]

    assert draw(3) == draw(3)
    assert draw(3) != draw(4)


def test_invalid_or_out_of_table_lengths_are_rejected(samplers):
    with pytest.raises(StacklmError, match="no string of length 40"):
        samplers["marked-reversal"].sample(40, random.Random(0))
    with pytest.raises(StacklmError, match="outside the sampler's table"):
        samplers["dyck-2"].log_total(101)
    with pytest.raises(StacklmError, match="length -1 is outside"):
        samplers["dyck-2"].valid_lengths(-1, 10)


def test_draw_never_returns_a_zero_weight_option_even_when_the_uniform_rounds_up():
    class Top(random.Random):
        def random(self) -> float:
            return 1.0 - 2.0**-53

    choice = Choice(expansions=((), (), (), ()), cumulative=(0.0, 0.3, 0.7, 0.7))
    assert choice.draw(Top()) == 2
    assert [choice.draw(random.Random(seed)) for seed in range(200)].count(0) == 0


PINNED_SAMPLES = {  # sha256 prefix of 4 strings at each of the 5 shortest valid lengths ≥ 40, seed 0
    "dyck-2": "90be77df61dfa8d6",
    "hardest-cfl": "611e8fffbf72ba36",
    "marked-reversal": "63ac3dd2c8bcb970",
    "padded-reversal": "1a2c6af009f47d5b",
    "unmarked-reversal": "b5cd8887ab660f40",
}


@pytest.mark.parametrize("name", sorted(PINNED_SAMPLES))
def test_a_seed_keeps_giving_the_same_strings(name, samplers):
    """The shared test sets (seed 0) must not drift: a change to the grammars, the compilation or
    the order of draws shows up here, and then these digests are updated on purpose."""
    sampler = samplers[name]
    generator = random.Random(0)
    strings = [sampler.sample(length, generator) for length in sampler.valid_lengths(40, 100)[:5] for _ in range(4)]
    assert hashlib.sha256(repr(strings).encode()).hexdigest()[:16] == PINNED_SAMPLES[name]
