"""The files a run reads and writes besides its Parquet records: settings, data, ``model.pt``.

``model.pt`` holds what evaluation needs to rebuild the model without the training run: the
model config (the class name and fields of a frozen dataclass of ``stacklm.models``: a model of
the registry, or a PTB model, its stack tagged with its kind), the best checkpoint's parameters
and their validation cross-entropy, the vocabulary, the task and architecture names (a PTB
model's: "ptb" and its name), and the run's metadata and settings, as tensors and plain values
that load without running code.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, get_args

import torch

from stacklm.data.dataset import drawn_splits
from stacklm.data.examples import read_examples
from stacklm.data.splits import SPLITS
from stacklm.data.validate import validate_splits
from stacklm.errors import StacklmError, located
from stacklm.models.base import LanguageModel
from stacklm.models.embedding import FeatureTable
from stacklm.models.ptb import PtbLanguageModel, PtbModelConfig, ptb_config_fields, ptb_config_from_fields
from stacklm.models.registry import ModelConfig, get_architecture, model_for_config
from stacklm.settings_file import build
from stacklm.tasks import Task
from stacklm.tasks.example import Example
from stacklm.training import checkpoint as checkpoint_file


def split_paths(data_dir: str | Path) -> list[Path]:
    paths = [Path(data_dir) / f"{split}.tsv" for split in SPLITS]
    for path in paths:
        if not path.is_file():
            raise located(path, None, "data file not found")
    return paths


def read_splits(data_dir: str | Path, task: Task) -> dict[str, list[Example]]:
    """The four splits of ``data_dir``, checked as the data stage checks what it writes
    (``stacklm.data.validate``): every error names ``file:line``."""
    paths = dict(zip(SPLITS, split_paths(data_dir)))
    splits = {split: read_examples(path) for split, path in paths.items()}
    for split, examples in splits.items():
        if not examples:
            raise located(paths[split], None, "no examples: the file is empty")
    validate_splits(task, splits, {split: str(path) for split, path in paths.items()}, drawn_splits(data_dir))
    return splits


def choose_device(requested: str | None) -> torch.device:
    """``--device``: cuda when asked for or, by default, when the job can see a GPU; else cpu."""
    if requested is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if requested == "cuda" and not torch.cuda.is_available():
        raise StacklmError("--device cuda: no CUDA device is visible to this job")
    return torch.device(requested)


def set_threads(threads: int | None) -> None:
    """``--threads``: torch's intra-op threads (the job's CPU cores); default: the cores this process may use."""
    torch.set_num_threads(threads if threads is not None else len(os.sched_getaffinity(0)))


def token_features(architecture: str, task: Task, tokens: tuple[str, ...]) -> FeatureTable | None:
    """The syntax-infused embedding's feature table, for the "+Syn" architectures only."""
    return FeatureTable.from_lexicon(task, tokens) if get_architecture(architecture).syntax else None


@dataclass(frozen=True)
class SavedModel:
    task: str
    architecture: str
    vocabulary: tuple[str, ...]  # ordinary tokens in index order; EOS follows
    model_config: Any  # the model's frozen config dataclass
    parameters: dict[str, torch.Tensor]
    metadata: dict[str, Any]  # RunMetadata fields
    settings: dict[str, Any]  # the run's resolved settings
    validation_cross_entropy: float | None = None  # of the parameters saved, as training measured it (PTB's evaluation reports it)
    source: str = ""  # the file it was loaded from (not saved), which errors name


MODEL_CONFIGS = {config.__name__: config for config in get_args(ModelConfig)}


def _config_fields(config: Any) -> dict[str, Any]:
    """A model config as plain values: a PTB model's stack tagged with its kind (a union of
    dataclasses), any other's fields."""
    if isinstance(config, PtbModelConfig):
        return ptb_config_fields(config)
    return json.loads(json.dumps(asdict(config)))


def _config_from_fields(name: str, fields: Any, source: str) -> Any:
    if name == PtbModelConfig.__name__:
        return ptb_config_from_fields(fields, f"{source}: model_config")
    return build(MODEL_CONFIGS[name], fields, "model_config")


def save_model(path: str | Path, saved: SavedModel) -> None:
    """``saved`` as tensors and plain values (``stacklm.training.checkpoint``): the model config
    as its class name and fields, so that loading rebuilds it without unpickling an object."""
    content = {name: value for name, value in saved.__dict__.items() if name != "source"}
    content["vocabulary"] = list(saved.vocabulary)
    content["model_config"] = {"class": type(saved.model_config).__name__, "fields": _config_fields(saved.model_config)}
    checkpoint_file.save(path, content)


def load_model(path: str | Path) -> SavedModel:
    if not Path(path).is_file():
        raise located(path, None, "model file not found (has `stacklm train` finished for this run?)")
    content = checkpoint_file.load(path)
    try:
        config = content["model_config"]
        content["model_config"] = _config_from_fields(config["class"], config["fields"], str(path))
        content["vocabulary"] = tuple(content["vocabulary"])
        return SavedModel(**content, source=str(path))
    except (KeyError, TypeError, StacklmError) as error:
        raise located(path, None, f"not a model file of this stacklm ({error}); delete it, and `stacklm train` writes it again") from None


def rebuild_model(saved: SavedModel, task: Task) -> LanguageModel:
    """The trained model of ``saved``, in eval mode, on the CPU."""
    model = model_for_config(saved.model_config, token_features(saved.architecture, task, saved.vocabulary))
    checkpoint_file.load_parameters(model, saved.parameters, saved.source)
    return model.eval()


def rebuild_ptb_model(saved: SavedModel) -> PtbLanguageModel:
    """The trained PTB model of ``saved``, in eval mode, on the CPU; a file whose vocabulary or
    parameters do not fit its model is a ``StacklmError`` naming it."""
    if not isinstance(saved.model_config, PtbModelConfig):
        raise located(saved.source, None, f"not a PTB model file (it holds a {type(saved.model_config).__name__}); {checkpoint_file.ADVICE}")
    if len(saved.vocabulary) + 1 != saved.model_config.vocabulary_size:
        raise located(saved.source, None, f"{len(saved.vocabulary)} tokens and <eos> for a model of V = {saved.model_config.vocabulary_size}; {checkpoint_file.ADVICE}")
    model = PtbLanguageModel(saved.model_config)
    checkpoint_file.load_parameters(model, saved.parameters, saved.source)
    return model.eval()
