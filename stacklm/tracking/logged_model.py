"""A final run's trained model as an MLflow model, loadable through MLflow's own API.

``stacklm tracking sync`` logs the ``model.pt`` of every run with results (a task's final run, a
CFL language's selected run, an evaluated PTB restart) with ``mlflow.pytorch.log_model``: the
rebuilt ``torch.nn.Module`` in eval mode on the CPU, pickled (MLflow's ``pt2`` format traces a
fixed graph, which the stacks' data-dependent loops are not), with stacklm's own code beside it
(``code_paths``), so that

    model = mlflow.pytorch.load_model("runs:/<run id>/model")

gives, without stacklm installed, the module that ``stacklm evaluate`` scored: ``model(tokens)``
with tokens (B, n) gives logits (B, n + 1, V) for a task or CFL model
(``stacklm.models.base``), ``model(inputs, model.initial_state(B))`` gives (logits, state) for a
PTB model (``stacklm.models.ptb``). The model's ``vocabulary.txt`` (an extra file) lists the
ordinary tokens in index order, one per line; EOS is the index after the last. This module
imports torch: the sync imports it only when it has a model to log.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import torch

from stacklm.models.registry import get_architecture, model_for_config
from stacklm.tracking.mlflow_mirror import ModelFile
from stacklm.tasks import get_task
from stacklm.training.run_files import load_model, rebuild_ptb_model, token_features

MODEL_ARTIFACT = "model"  # the name under the run: runs:/<run id>/model
VOCABULARY_FILE = "vocabulary.txt"


def trained_module(model_file: ModelFile) -> tuple[torch.nn.Module, tuple[str, ...]]:
    """The trained model of ``model_file`` (eval mode, CPU) and its vocabulary; a file that is
    not such a model is a ``StacklmError`` naming it."""
    saved = load_model(model_file.path)
    if model_file.kind == "ptb":
        return rebuild_ptb_model(saved), saved.vocabulary
    syntax = model_file.kind == "task" and get_architecture(saved.architecture).syntax
    features = token_features(saved.architecture, get_task(saved.task), saved.vocabulary) if syntax else None
    model = model_for_config(saved.model_config, features)
    model.load_state_dict(saved.parameters)
    return model.eval(), saved.vocabulary


def log_trained_model(tracking_uri: str, run_id: str, model_file: ModelFile, code: Path, metadata: dict[str, Any]) -> str:
    """Log ``model_file``'s model to the MLflow run ``run_id`` as ``runs:/<run_id>/model``, with the
    package copy ``code`` (``stacklm.tracking.mlflow_mirror.package_code``) and ``metadata`` in its MLmodel file; its model URI."""
    import mlflow
    import mlflow.pytorch

    module, vocabulary = trained_module(model_file)
    mlflow.set_tracking_uri(tracking_uri)
    with tempfile.TemporaryDirectory(prefix="stacklm-vocabulary-") as folder:
        tokens = Path(folder) / VOCABULARY_FILE
        tokens.write_text("".join(f"{token}\n" for token in vocabulary), encoding="utf-8")
        with mlflow.start_run(run_id=run_id):
            logged = mlflow.pytorch.log_model(
                module,
                name=MODEL_ARTIFACT,
                code_paths=[str(code)],
                serialization_format="pickle",
                pip_requirements=[f"torch=={torch.__version__}"],  # given: inferring them loads the model in a subprocess
                extra_files=[str(tokens)],
                metadata=metadata,
            )
    return logged.model_uri
