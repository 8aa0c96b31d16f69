"""Weighted context-free grammars: the project's file format, sampling and parsing."""

from __future__ import annotations

from functools import cache
from importlib import resources

from stacklm.grammars.derivation import CompiledGrammar, Parse, Skeleton, Tree
from stacklm.grammars.grammar import Grammar, Rule, format_grammar, load_grammar, parse_grammar

__all__ = ["CompiledGrammar", "Grammar", "Parse", "Rule", "Skeleton", "Tree", "format_grammar", "load_grammar", "parse_grammar", "grammar_path", "compiled"]


def grammar_path(name: str):
    """The packaged grammar file ``stacklm/grammars/data/<name>.cfg``."""
    return resources.files("stacklm.grammars") / "data" / f"{name}.cfg"


@cache
def compiled(name: str) -> CompiledGrammar:
    """The packaged grammar ``name``, loaded and compiled once per process."""
    return CompiledGrammar(load_grammar(grammar_path(name)))
