"""stacklm.workflow.document: the scale every part of report.pdf states, and its CFL and PTB parts."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import yaml

from stacklm.workflow.document import cfl_scale, document_inputs, document_parts, ptb_report_options, ptb_scale, report_options, transformations_scale
from stacklm.workflow.settings import ResolvedSettings, resolve

CONFIG = yaml.safe_load((Path(__file__).resolve().parents[2] / "config.yaml").read_text())


def settings(preset: str | None) -> ResolvedSettings:
    return resolve(CONFIG | {"preset": preset}, {})


def test_the_small_preset_says_it_is_a_toy_scale_with_its_data_examples_epochs_and_seeds() -> None:
    small = settings("small")
    statement = transformations_scale("small", small)
    assert statement.startswith("Preset small: data drawn from stacklm's grammars; 500 training examples per task")
    assert "1 search trial of at most 1 epoch" in statement and "1 seed trained at most 1 epoch" in statement
    assert statement.endswith("A reduced scale: these numbers show the pipeline working, not the papers' results.")
    assert "at most 1 epoch of 5 batches of 10 strings" in cfl_scale("small", small.cfl) and "reduced" in cfl_scale("small", small.cfl)
    assert ptb_scale("small", small.ptb).startswith("Preset small: the first 100 lines of each PTB split; 2 restarts per model of at most 2 epochs; 3 SyntaxGym suites.")


def test_the_papers_settings_say_so_and_claim_no_reduction() -> None:
    full = settings(None)
    for statement in (transformations_scale(None, full), cfl_scale(None, full.cfl), ptb_scale(None, full.ptb)):
        assert statement.startswith("The papers' settings (no preset)") and "reduced" not in statement
    assert "the upstream data (McCoy et al., 2020; Mueller et al., 2022); 100,000 training examples per task" in transformations_scale(None, full)
    assert "5 seeds trained to convergence" in transformations_scale(None, full)


def test_the_document_includes_the_cfl_figures_and_the_ptb_tables_and_figure_captioned_with_their_scale() -> None:
    small = settings("small")
    cfl, ptb = document_parts("small", small)
    assert cfl["figures"][0]["path"] == "results/cfl/figures/validation.pdf" and cfl["tables"] == []
    assert ptb["tables"] == ["results/ptb/report/ptb.tex", "results/ptb/report/circuits.tex"]
    assert ptb["figures"][0]["path"] == "results/ptb/report/sg-against-perplexity.pdf"
    assert all(figure["caption"].endswith(part["scale"]) for part in (cfl, ptb) for figure in part["figures"])
    assert set(document_inputs("small", small)) == {path for part in (cfl, ptb) for path in [*part["tables"], *(f["path"] for f in part["figures"])]}
    words = shlex.split(report_options("small", small))
    assert words[:2] == ["--scale", transformations_scale("small", small)] and json.loads(words[3]) == [cfl, ptb]
    assert shlex.split(ptb_report_options("small", small)) == ["--scale", ptb_scale("small", small.ptb)]
    ci = settings("ci")  # no CFL or PTB job: no such part
    assert document_parts("ci", ci) == [] and document_inputs("ci", ci) == []
