"""The five context-free languages of the RNS-RNN paper [DuSell & Chiang 2022, §4, App. 8].

Each language is a PCFG built from "mean" parameters through stop(m) = 1/(m+1) and
cont(m) = m/(m+1), so that a recursive rule repeats a geometric number of times with mean m;
the default parameters are those of the experiment scripts, and the resulting rule
probabilities are those of ``docs/design/cfl-and-ptb.md#cfl-languages``:

- marked reversal     {v # vᴿ : v ∈ {0,1}*},          S → a S a (cont(60)/2), S → # (stop(60));
- unmarked reversal   {v vᴿ},                          S → a S a (cont(60)/2), S → ε (stop(60));
- padded reversal     {v aᵖ vᴿ : a ∈ {0,1}, p ≥ 0},     S → a S a, S → T_a (stop(60)/2), T_a → a T_a (cont(30)) | ε;
- Dyck-2              balanced ( ) and [ ],            S → S T (cont(1)) | T, T → ( S ) (cont(39)/2) | ( ) …;
- hardest CFL         Greibach's language, start S′ → R $ Q S L ;.

Terminals are 0 … K−1 and the model vocabulary adds EOS = K.
"""

from __future__ import annotations

from dataclasses import dataclass

from stacklm.cfl.grammar import Symbol, WeightedGrammar, cont, stop
from stacklm.errors import StacklmError


@dataclass(frozen=True)
class CflLanguage:
    """A named language: its PCFG and the spelling of its terminals 0 … K−1."""

    name: str
    grammar: WeightedGrammar
    terminal_names: tuple[str, ...]  # terminal_names[a] spells terminal a

    @property
    def num_terminals(self) -> int:
        """K."""
        return self.grammar.num_terminals

    @property
    def eos(self) -> int:
        """The index of EOS in the model vocabulary, K."""
        return self.num_terminals

    @property
    def vocabulary_size(self) -> int:
        """K + 1: the terminals and EOS."""
        return self.num_terminals + 1


WeightedRule = tuple[str, tuple[Symbol, ...], float]


def marked_reversal(symbol_types: int = 2, mean_length: float = 60) -> CflLanguage:
    """S → a S a with cont(m)/|types| for each a, S → # with stop(m); # = ``symbol_types``."""
    marker = symbol_types
    rules: list[WeightedRule] = [("S", (a, "S", a), cont(mean_length) / symbol_types) for a in range(symbol_types)]
    rules.append(("S", (marker,), stop(mean_length)))
    names = tuple(str(a) for a in range(symbol_types)) + ("#",)
    return CflLanguage("marked-reversal", WeightedGrammar.from_weights("S", rules, symbol_types + 1), names)


def unmarked_reversal(symbol_types: int = 2, mean_length: float = 60) -> CflLanguage:
    """S → a S a with cont(m)/|types| for each a, S → ε with stop(m)."""
    rules: list[WeightedRule] = [("S", (a, "S", a), cont(mean_length) / symbol_types) for a in range(symbol_types)]
    rules.append(("S", (), stop(mean_length)))
    names = tuple(str(a) for a in range(symbol_types))
    return CflLanguage("unmarked-reversal", WeightedGrammar.from_weights("S", rules, symbol_types), names)


def padded_reversal(symbol_types: int = 2, mean_content_length: float = 60, mean_padding_length: float = 30) -> CflLanguage:
    """S → a S a (cont(m_c)/|types|), S → T_a (stop(m_c)/|types|), T_a → a T_a (cont(m_p)) | ε (stop(m_p))."""
    rules: list[WeightedRule] = [("S", (a, "S", a), cont(mean_content_length) / symbol_types) for a in range(symbol_types)]
    rules += [("S", (f"T{a}",), stop(mean_content_length) / symbol_types) for a in range(symbol_types)]
    for a in range(symbol_types):
        rules += [(f"T{a}", (a, f"T{a}"), cont(mean_padding_length)), (f"T{a}", (), stop(mean_padding_length))]
    names = tuple(str(a) for a in range(symbol_types))
    return CflLanguage("padded-reversal", WeightedGrammar.from_weights("S", rules, symbol_types), names)


BRACKETS = "()[]{}<>"


def dyck(bracket_types: int = 2, mean_bracket_splits: float = 1, mean_nesting_depth: float = 40) -> CflLanguage:
    """S → S T (cont(m_s)) | T (stop(m_s)); T → ⟨ S ⟩ (cont(m_d − 1)/|types|) | ⟨ ⟩ (stop(m_d − 1)/|types|).

    Bracket type b opens with terminal 2b and closes with 2b + 1: ( = 0, ) = 1, [ = 2, ] = 3.
    """
    split, nest = cont(mean_bracket_splits), cont(mean_nesting_depth - 1)
    rules: list[WeightedRule] = [("S", ("S", "T"), split), ("S", ("T",), 1 - split)]
    for b in range(bracket_types):
        rules += [("T", (2 * b, "S", 2 * b + 1), nest / bracket_types), ("T", (2 * b, 2 * b + 1), (1 - nest) / bracket_types)]
    if not 1 <= bracket_types <= len(BRACKETS) // 2:
        raise StacklmError(f"Dyck languages here have 1 to {len(BRACKETS) // 2} bracket types, not {bracket_types}")
    return CflLanguage("dyck-2" if bracket_types == 2 else f"dyck-{bracket_types}", WeightedGrammar.from_weights("S", rules, 2 * bracket_types), tuple(BRACKETS[: 2 * bracket_types]))


OPEN_ROUND, CLOSE_ROUND, OPEN_SQUARE, CLOSE_SQUARE, COMMA, SEMICOLON, DOLLAR = range(7)


def hardest_cfl(
    mean_num_commas: float = 0.5,
    mean_short_filler_length: float = 0.5,
    mean_long_filler_length: float = 2,
    semicolon_probability: float = 0.25,
    mean_bracket_splits: float = 1.5,
    mean_nesting_depth: float = 3,
) -> CflLanguage:
    """Greibach's hardest CFL as encoded by the authors, start symbol S′.

    c = cont(mean commas), u = cont(mean short filler), v = cont(mean long filler − 1),
    q = semicolon probability, s = cont(mean splits), t = cont(mean nesting depth).
    """
    c, u = cont(mean_num_commas), cont(mean_short_filler_length)
    v, q = cont(mean_long_filler_length - 1), semicolon_probability
    s, t = cont(mean_bracket_splits), cont(mean_nesting_depth)
    rules: list[WeightedRule] = [
        ("S'", ("R", DOLLAR, "Q", "S", "L", SEMICOLON), 1),
        ("L", ("L'", COMMA, "U"), 1),
        ("L'", (COMMA, "V", "L'"), c),
        ("L'", (), 1 - c),
        ("R", ("U", COMMA, "R'"), 1),
        ("R'", ("R'", "V", COMMA), c),
        ("R'", (), 1 - c),
        ("U", ("W", "U"), u),
        ("U", (), 1 - u),
        ("V", ("W", "V"), v),
        ("V", ("W",), 1 - v),
    ]
    rules += [("W", (symbol,), 1) for symbol in (OPEN_ROUND, CLOSE_ROUND, OPEN_SQUARE, CLOSE_SQUARE, DOLLAR)]
    rules += [
        ("Q", ("L", SEMICOLON, "R"), q),
        ("Q", (), 1 - q),
        ("S", ("S", "Q", "T"), s),
        ("S", ("T",), 1 - s),
    ]
    for opening, closing in ((OPEN_ROUND, CLOSE_ROUND), (OPEN_SQUARE, CLOSE_SQUARE)):
        rules += [("T", (opening, "Q", "S", "Q", closing), t / 2), ("T", (opening, "Q", closing), (1 - t) / 2)]
    return CflLanguage("hardest-cfl", WeightedGrammar.from_weights("S'", rules, 7), ("(", ")", "[", "]", ",", ";", "$"))


LANGUAGES: dict[str, CflLanguage] = {
    language.name: language
    for language in (marked_reversal(), unmarked_reversal(), padded_reversal(), dyck(), hardest_cfl())
}
