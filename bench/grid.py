"""What the full settings cost: CPU core-hours (and GPU-hours) of the three experiments.

A projection from measured throughputs, not a run. For the settings of ``config.yaml`` (its full
settings, or ``--preset``):

**Transformations** (DuSell & Cotterell), per task and architecture:

- tokens of one training epoch = training examples × mean (|w| + 1), w = source · target (the
  positions a language model predicts, EOS included), from the task's data: the written
  ``results/data/<task>/train.tsv`` when there is one, else 2,000 examples drawn as
  ``stacklm data generate`` does;
- each search trial trains ``search.max_epochs`` epochs, each final seed ``final.max_epochs``;
  where the config says "to convergence" (null), ``--epochs-to-convergence`` (an assumption:
  early stopping ends the run, and no run has been made at full scale here);
- every checkpoint (``training.examples_per_checkpoint``) scores the validation split, and each
  final seed is evaluated on test and generalization with ``evaluation.samples_per_input``
  samples per example; both are forward passes, counted as ``--forward-share`` of a training
  token's cost (forward only, no backward), a sample's tokens as many as its example's;
- seconds = tokens ÷ throughput, the throughput of that architecture at the task's mean length,
  interpolated in log–log between the lengths measured by ``bench/models.py`` (read from
  ``--throughputs``, its ``--json`` output, or measured now at n = 16, 32, 64).

**CFL** (DuSell & Chiang, "Learning Hierarchical Structures with Differentiable Nondeterministic
Stacks", §4, App. 8), per language L and model X of the ``cfl`` section:

- runs = learning rates × (vector sizes, for Gref and JM) × restarts;
- one epoch = ``train_batches`` batches of 10 strings of one length ℓ, ℓ uniform over L's valid
  lengths in [40, 80], so an epoch's expected seconds are train_batches × mean_ℓ 10ℓ / r_X(ℓ),
  r_X(ℓ) the training throughput of ``bench/models.py --cfl-language L`` (its CFL batch: 10
  strings of length ℓ, whose ℓ inputs give ℓ + 1 predictions) interpolated as above; then
  ``validation_batches`` batches the same way, forward only (``--forward-share``);
- a run trains min(``--cfl-epochs``, ``max_epochs``) epochs: ``--cfl-epochs`` is an assumption
  (early stopping after 10 epochs without a new best ends a run; none has run at full scale
  here), and the cap of ``max_epochs`` is projected too;
- the selected run of (L, X) scores ``test_strings_per_length`` strings of each valid length in
  [40, 100], forward only;
- Gref and JM are timed at m = 20 for every m of the grid; Figure 2's action logging (one
  string every 100 updates) is left out.

**PTB** (the same paper, §5, App. 10), per model of the ``ptb`` section: restarts × (E epochs ×
(training targets ÷ training rate + validation targets ÷ evaluation rate) + test targets ÷
evaluation rate + the SG suites' seconds), with the split sizes counted from the PTB files of
``ptb.mirror`` or the downloads in ``resources/`` (the first ``ptb.lines`` lines when set) and the rates of ``bench/ptb.py
--project --json`` (``--ptb-rates``, or measured now). E is min(``--ptb-epochs``, ``max_epochs``),
an assumption like ``--cfl-epochs`` (early stopping after 2 epochs without a new best); the cap
is projected too.

CPU core-hours assume one core per run (the throughputs are per CPU second on one thread).
``--gpu`` (``bench/gpu.sh``'s JSON, when a GPU has run it) adds GPU-hours from its training
throughputs: the transformations' architectures, and the CFL models when it holds ``cfl/``
records; ``--ptb-gpu`` (``bench/ptb.py --project --device cuda --json``) the PTB models'.

    .venv/bin/python bench/grid.py [--throughputs models.jsonl] [--cfl-throughputs cfl.jsonl] [--ptb-rates ptb.jsonl] [--json]
    .venv/bin/python bench/grid.py --experiments cfl --cfl-epochs 60      # one experiment
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from stacklm.cfl.languages import LANGUAGES
from stacklm.cfl.sampling import LengthSampler
from stacklm.cfl.splits import BATCH_SIZE, SPLIT_LENGTHS
from stacklm.data.examples import read_examples
from stacklm.data.ptb import first_lines, read_split
from stacklm.data.splits import SplitSizes, build_splits
from stacklm.experiments.cfl.search import grid
from stacklm.experiments.cfl.settings import CflSettings
from stacklm.experiments.ptb.settings import PtbSettings
from stacklm.tasks import get_task
from stacklm.workflow.settings import ResolvedSettings, resolve

ROOT = Path(__file__).resolve().parent.parent
SAMPLE_EXAMPLES = 2000
EXPERIMENTS = ("transformations", "cfl", "ptb")
CFL_LENGTHS = (40, 60, 80, 100)  # measured now: the training range [40, 80] and the test range's end


@dataclass(frozen=True)
class Throughput:
    """Tokens per second of one architecture at the measured lengths."""

    lengths: tuple[int, ...]
    tokens_per_s: tuple[float, ...]

    def at(self, length: float) -> float:
        """Log–log interpolation between the measured lengths; the end segments extrapolate."""
        if len(self.lengths) == 1:
            return self.tokens_per_s[0]
        xs = [math.log(value) for value in self.lengths]
        ys = [math.log(value) for value in self.tokens_per_s]
        x = math.log(length)
        index = min(max(sum(1 for value in xs if value <= x) - 1, 0), len(xs) - 2)
        slope = (ys[index + 1] - ys[index]) / (xs[index + 1] - xs[index])
        return math.exp(ys[index] + slope * (x - xs[index]))

    def seconds(self, lengths: tuple[int, ...], strings: int) -> float:
        """Seconds of ``strings`` strings of each length in ``lengths`` (ℓ tokens each, as bench/models.py counts them)."""
        return sum(strings * length / self.at(length) for length in lengths)


def throughputs(records: list[dict[str, Any]], key: str) -> dict[str, Throughput]:
    """Per architecture, ``key`` (tokens per second) by length, from JSON records with ``architecture`` and ``n``
    (records of one task's own strings, ``n = "task"`` from ``bench/models.py --task-data``, have no length: left out)."""
    by_architecture: dict[str, dict[int, float]] = {}
    for record in records:
        if key in record and isinstance(record["n"], int):
            by_architecture.setdefault(record["architecture"], {})[int(record["n"])] = float(record[key])
    return {
        name: Throughput(tuple(sorted(values)), tuple(values[length] for length in sorted(values)))
        for name, values in by_architecture.items()
    }


def read_json_lines(path: Path) -> list[dict[str, Any]]:
    text = path.read_text()
    stripped = text.strip()
    if stripped.startswith("["):
        return json.loads(stripped)
    if stripped.startswith("{") and "\n{" not in stripped:
        loaded = json.loads(stripped)
        return loaded.get("training", [loaded]) if isinstance(loaded, dict) else loaded
    return [json.loads(line) for line in text.splitlines() if line.strip().startswith("{")]


def run_json(arguments: list[str]) -> list[dict[str, Any]]:
    """The JSON lines printed by the bench script ``arguments[0]`` run with the rest (minutes)."""
    command = [sys.executable, str(ROOT / "bench" / arguments[0]), *arguments[1:]]
    output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return [json.loads(line) for line in output.splitlines() if line.startswith("{")]


def mean_scored_length(task: str) -> float:
    """Mean |w| + 1 over training examples, w = source · target."""
    written = ROOT / "results" / "data" / task / "train.tsv"
    if written.exists():
        examples = read_examples(written)
    else:
        splits = build_splits(get_task(task), SplitSizes(train=SAMPLE_EXAMPLES, validation=0, test=0, generalization=0), seed=1)
        examples = splits.train
    return sum(len(example.language_model_string()) + 1 for example in examples) / len(examples)


def project_transformations(settings: ResolvedSettings, cpu: dict[str, Throughput], gpu: dict[str, Throughput], arguments: argparse.Namespace) -> list[dict[str, Any]]:
    sizes = settings.data.sizes
    search_epochs = settings.search.max_epochs or arguments.epochs_to_convergence
    final_epochs = settings.final.max_epochs or arguments.epochs_to_convergence
    trials = settings.search.trials if settings.search.trials > 1 else 0  # one trial: drawn, not trained
    seeds = len(settings.final.seeds)
    checkpoints_per_epoch = sizes.train / settings.training.examples_per_checkpoint
    samples = settings.evaluation.samples_per_input
    rows = []
    for task in settings.tasks:
        length = mean_scored_length(task)
        epoch_tokens = sizes.train * length
        validation_tokens = checkpoints_per_epoch * sizes.validation * length
        training_tokens = (trials * search_epochs + seeds * final_epochs) * epoch_tokens
        forward_tokens = (trials * search_epochs + seeds * final_epochs) * validation_tokens
        forward_tokens += seeds * (sizes.test + sizes.generalization) * length * (1 + samples)
        equivalent_tokens = training_tokens + arguments.forward_share * forward_tokens
        for architecture in settings.architectures:
            if architecture not in cpu:
                raise SystemExit(f"no throughput for {architecture}: measure it with bench/models.py --json")
            row = {
                "experiment": "transformations",
                "task": task,
                "architecture": architecture,
                "mean_scored_length": length,
                "training_tokens": training_tokens,
                "cpu_tokens_per_s": cpu[architecture].at(length),
                "cpu_core_hours": equivalent_tokens / cpu[architecture].at(length) / 3600,
            }
            if architecture in gpu:
                row["gpu_tokens_per_s"] = gpu[architecture].at(length)
                row["gpu_hours"] = equivalent_tokens / gpu[architecture].at(length) / 3600
            rows.append(row)
    return rows


@dataclass(frozen=True)
class CflLengths:
    """A language's valid string lengths in the training range (train and validation batches) and the test range."""

    training: tuple[int, ...]
    test: tuple[int, ...]


def cfl_lengths(language: str) -> CflLengths:
    sampler = LengthSampler.build(LANGUAGES[language].grammar, SPLIT_LENGTHS["test"][1])
    return CflLengths(sampler.valid_lengths(*SPLIT_LENGTHS["train"]), sampler.valid_lengths(*SPLIT_LENGTHS["test"]))


def cfl_hours(settings: CflSettings, lengths: CflLengths, rate: Throughput, runs: int, epochs: int, forward_share: float) -> float:
    """Hours of one (language, model) grid of ``runs`` runs at ``epochs`` epochs each: their training and validation, and the selected run's test."""
    batch_seconds = rate.seconds(lengths.training, BATCH_SIZE) / len(lengths.training)  # expected, ℓ uniform over the valid lengths
    epoch_seconds = (settings.train_batches + forward_share * settings.validation_batches) * batch_seconds
    test_seconds = forward_share * rate.seconds(lengths.test, settings.test_strings_per_length)
    return (runs * epochs * epoch_seconds + test_seconds) / 3600


def project_cfl(settings: CflSettings, lengths: dict[str, CflLengths], cpu: dict[str, dict[str, Throughput]], gpu: dict[str, Throughput], arguments: argparse.Namespace) -> list[dict[str, Any]]:
    """A row per (language, model): ``cpu[language][model]`` is the model's throughput at that language's batch."""
    epochs = {"": min(arguments.cfl_epochs, settings.max_epochs), "_cap": settings.max_epochs}
    rows = []
    for language in settings.languages:
        for model in settings.models:
            rate = cpu.get(language, {}).get(model)
            if rate is None:
                raise SystemExit(f"no throughput for {model} on {language}: measure it with bench/models.py --cfl-language {language} --json")
            runs = len(grid(settings, language, model))
            row: dict[str, Any] = {"experiment": "cfl", "language": language, "model": model, "runs": runs}
            for suffix, count in epochs.items():
                row["cpu_core_hours" + suffix] = cfl_hours(settings, lengths[language], rate, runs, count, arguments.forward_share)
                if model in gpu:
                    row["gpu_hours" + suffix] = cfl_hours(settings, lengths[language], gpu[model], runs, count, arguments.forward_share)
            rows.append(row)
    return rows


@dataclass(frozen=True)
class PtbTargets:
    """Targets (tokens, each predicted once) of each PTB split."""

    train: int
    valid: int
    test: int


def ptb_targets(settings: PtbSettings) -> PtbTargets:
    """From the PTB files the jobs read: ``ptb.mirror``'s, or those the download rules put in ``resources/``."""
    root = Path(settings.data_root) if Path(settings.data_root).is_absolute() else ROOT / settings.data_root
    if not (root / "ptb").is_dir():
        raise SystemExit(f"no PTB files under {root / 'ptb'}: set ptb.mirror, or download them (snakemake ptb_download)")
    return PtbTargets(*(len(first_lines(read_split(root / "ptb", split), settings.lines)) for split in ("train", "valid", "test")))


def ptb_hours(settings: PtbSettings, targets: PtbTargets, rates: dict[str, Any], epochs: int) -> float:
    """Hours of one model's restarts from its ``bench/ptb.py --project`` rates (``train_tokens_per_s``, ``eval_tokens_per_s``, ``sg_s``)."""
    epoch_seconds = targets.train / rates["train_tokens_per_s"] + targets.valid / rates["eval_tokens_per_s"]
    once_seconds = targets.test / rates["eval_tokens_per_s"] + rates["sg_s"]
    return settings.restarts * (epochs * epoch_seconds + once_seconds) / 3600


def project_ptb(settings: PtbSettings, targets: PtbTargets, cpu: dict[str, dict[str, Any]], gpu: dict[str, dict[str, Any]], arguments: argparse.Namespace) -> list[dict[str, Any]]:
    epochs = {"": min(arguments.ptb_epochs, settings.max_epochs), "_cap": settings.max_epochs}
    rows = []
    for model in settings.models:
        if model not in cpu:
            raise SystemExit(f"no rates for {model}: measure them with bench/ptb.py --project --json")
        row: dict[str, Any] = {"experiment": "ptb", "model": model, "restarts": settings.restarts}
        for suffix, count in epochs.items():
            row["cpu_core_hours" + suffix] = ptb_hours(settings, targets, cpu[model], count)
            if model in gpu:
                row["gpu_hours" + suffix] = ptb_hours(settings, targets, gpu[model], count)
        rows.append(row)
    return rows


def model_rates(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """``bench/ptb.py --project --json``'s per-model rows by model (its summary row has none)."""
    return {record["model"]: record for record in records if "model" in record}


def cfl_throughputs(records: list[dict[str, Any]]) -> dict[str, dict[str, Throughput]]:
    """By language, then model: ``bench/models.py --cfl-language --json`` records (each names its ``language``)."""
    languages = sorted({record["language"] for record in records if "language" in record})
    return {language: throughputs([record for record in records if record.get("language") == language], "tokens_per_cpu_s") for language in languages}


def summed(rows: list[dict[str, Any]], key: str) -> float | None:
    """The sum of ``key`` over ``rows``; None when a row lacks it."""
    return sum(row[key] for row in rows) if rows and all(key in row for row in rows) else None


def print_table(title: str, rows: list[dict[str, Any]], label: str, key: str) -> None:
    totals: dict[str, float] = {}
    for row in rows:
        totals[row[label]] = totals.get(row[label], 0.0) + row[key]
    print(f"| {label} | {title} |")
    print("|---|---:|")
    for name, hours in totals.items():
        print(f"| {name} | {hours:,.0f} |")


def measure_transformations(settings: ResolvedSettings, arguments: argparse.Namespace) -> list[dict[str, Any]]:
    if arguments.throughputs:
        return read_json_lines(arguments.throughputs)
    return run_json(["models.py", "--json", "--lengths", "16", "32", "64", "--repeats", str(arguments.repeats), "--architectures", *settings.architectures])


def measure_cfl(settings: CflSettings, arguments: argparse.Namespace) -> list[dict[str, Any]]:
    if arguments.cfl_throughputs:
        return read_json_lines(arguments.cfl_throughputs)
    lengths = [str(length) for length in CFL_LENGTHS]
    return [
        record
        for language in settings.languages
        for record in run_json(["models.py", "--json", "--cfl-language", language, "--lengths", *lengths, "--repeats", str(arguments.repeats), "--architectures", *settings.models])
    ]


def measure_ptb(arguments: argparse.Namespace) -> list[dict[str, Any]]:
    if arguments.ptb_rates:
        return read_json_lines(arguments.ptb_rates)
    preset = ["--preset", arguments.preset] if arguments.preset else []
    return run_json(["ptb.py", "--project", "--json", "--threads", "1", "--repeats", str(arguments.repeats), *preset])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=ROOT / "config.yaml")
    parser.add_argument("--preset", help="a preset of the config (default: the full settings)")
    parser.add_argument("--experiments", nargs="+", choices=EXPERIMENTS, default=list(EXPERIMENTS))
    parser.add_argument("--throughputs", type=Path, help="bench/models.py --json output (default: measure now)")
    parser.add_argument("--cfl-throughputs", type=Path, help="bench/models.py --cfl-language L --json output of every language (default: measure now)")
    parser.add_argument("--ptb-rates", type=Path, help="bench/ptb.py --project --json output (default: measure now)")
    parser.add_argument("--repeats", type=int, default=3, help="rounds of each measurement made now")
    parser.add_argument("--gpu", type=Path, default=ROOT / "bench" / "measurements" / "gpu.json", help="bench/gpu.sh's JSON, if present")
    parser.add_argument("--ptb-gpu", type=Path, help="bench/ptb.py --project --device cuda --json output, if any")
    parser.add_argument("--epochs-to-convergence", type=float, default=20.0, help="epochs of a run the config trains to convergence (assumed)")
    parser.add_argument("--cfl-epochs", type=int, default=60, help="epochs of a CFL run before early stopping (assumed; at most cfl.max_epochs)")
    parser.add_argument("--ptb-epochs", type=int, default=20, help="epochs of a PTB restart before early stopping (assumed; at most ptb.max_epochs)")
    parser.add_argument("--forward-share", type=float, default=1 / 3, help="cost of a forward-only token over a training token")
    parser.add_argument("--json", action="store_true", help="one JSON object per row, then the totals")
    arguments = parser.parse_args()
    config = yaml.safe_load(arguments.config.read_text())
    config["preset"] = arguments.preset
    settings = resolve(config)
    gpu = throughputs(read_json_lines(arguments.gpu), "tokens_per_s") if arguments.gpu.exists() else {}
    rows: dict[str, list[dict[str, Any]]] = {}
    if "transformations" in arguments.experiments and settings.tasks and settings.architectures:
        cpu = throughputs(measure_transformations(settings, arguments), "tokens_per_cpu_s")
        rows["transformations"] = project_transformations(settings, cpu, gpu, arguments)
    if "cfl" in arguments.experiments and settings.cfl.languages:
        lengths = {language: cfl_lengths(language) for language in settings.cfl.languages}
        rows["cfl"] = project_cfl(settings.cfl, lengths, cfl_throughputs(measure_cfl(settings.cfl, arguments)), gpu, arguments)
    if "ptb" in arguments.experiments and settings.ptb.models:
        ptb_gpu = model_rates(read_json_lines(arguments.ptb_gpu)) if arguments.ptb_gpu else {}
        rows["ptb"] = project_ptb(settings.ptb, ptb_targets(settings.ptb), model_rates(measure_ptb(arguments)), ptb_gpu, arguments)
    totals = {
        experiment: {"cpu_core_hours": summed(found, "cpu_core_hours"), "cpu_core_hours_cap": summed(found, "cpu_core_hours_cap"), "gpu_hours": summed(found, "gpu_hours")}
        for experiment, found in rows.items()
    }
    total_cpu = sum(total["cpu_core_hours"] or 0.0 for total in totals.values())
    assumptions = {"epochs_to_convergence": arguments.epochs_to_convergence, "cfl_epochs": arguments.cfl_epochs, "ptb_epochs": arguments.ptb_epochs}
    if arguments.json:
        for found in rows.values():
            for row in found:
                print(json.dumps(row))
        print(json.dumps({"total": {"cpu_core_hours": total_cpu, "experiments": totals, **assumptions}}))
        return
    print(
        f"{'preset ' + arguments.preset if arguments.preset else 'full settings'}; assumed epochs before early stopping: transformations "
        f"{arguments.epochs_to_convergence:g} (where the config trains to convergence), CFL {arguments.cfl_epochs}, PTB {arguments.ptb_epochs}"
    )
    if "transformations" in rows:
        print_table("CPU core-hours (all tasks)", rows["transformations"], "architecture", "cpu_core_hours")
        print_table("CPU core-hours (all architectures)", rows["transformations"], "task", "cpu_core_hours")
    if "cfl" in rows:
        print_table("CFL CPU core-hours (all languages)", rows["cfl"], "model", "cpu_core_hours")
        print_table("CFL CPU core-hours (all models)", rows["cfl"], "language", "cpu_core_hours")
    if "ptb" in rows:
        print_table("PTB CPU core-hours (all restarts)", rows["ptb"], "model", "cpu_core_hours")
    for experiment, total in totals.items():
        cap = f" ({total['cpu_core_hours_cap']:,.0f} at the epoch cap)" if total["cpu_core_hours_cap"] is not None else ""
        gpu_text = f", {total['gpu_hours']:,.0f} GPU-hours" if total["gpu_hours"] is not None else ", no GPU measurement of every row"
        print(f"{experiment}: {total['cpu_core_hours']:,.0f} CPU core-hours{cap}{gpu_text}")
    print(f"total: {total_cpu:,.0f} CPU core-hours")


if __name__ == "__main__":
    main()
