"""The loss of K runs of one architecture in one forward: their parameters stacked, the
forward vmapped (``torch.func.vmap`` over ``functional_call``), for the GPU, where a step of
a small model costs its kernel launches, not its arithmetic.

Run k's batch (B_k strings, padded to n_k) is padded to (B, n) = the largest of the step: its
strings are the first B_k rows, its positions the first n_k + 1 of each. The models are causal
(a position never depends on a later one, ``stacklm.models.base``), so the padding changes no
real position; padded strings score nothing. Run k's loss is App. D's,

    ℓ_k = −(1/B_k) Σ_{i ≤ B_k} log p_{θ_k}(w_i·EOS),

with θ_k its own parameters and the dropout masks it draws alone (``run_dropout``). The
stacked parameters are ``torch.stack`` of each run's own, so the backward of Σ_k ℓ_k leaves
∂ℓ_k/∂θ_k in run k's model: its clipping and Adam step are its own (``stacklm.training.grouped``).

On CUDA a run alone replays CUDA graphs of its batches padded to buckets
(``stacklm.training.cuda_graph``), so its forward draws its masks for the bucket's shape
(bucket_size(B_k), bucket_size(n_k)): with ``bucketed`` the step draws each run's masks for
that shape, as that run alone draws them, and pads to the largest bucket of the step.

Contract: the models have the same parameter names and shapes and the same dropout p (one
architecture and one set of model options) and run on the torch backend; their batches,
learning rates and schedules may differ. The PyTorch implementations are vmappable: the stack's
custom autograd functions fold the vmapped dimension into their batch (``stacklm.stacks.shifted``).
"""

from __future__ import annotations

import functools
from typing import Sequence

import torch
from torch import Tensor, nn
from torch.func import functional_call, vmap

from stacklm.errors import StacklmError
from stacklm.training.batching import PADDING_INPUT, Batch
from stacklm.training.buckets import bucket_size
from stacklm.training.loss import position_log_probabilities
from stacklm.training.run_dropout import DropoutDraws, RunRandomness, draw_masks, masked_model, padded


class GroupedStep:
    """The loss of each of several runs of ``template``'s architecture on its own batch, in one vmapped forward."""

    def __init__(self, template: nn.Module, bucketed: bool = False) -> None:
        self.bucketed = bucketed  # each run's masks drawn for its batch's bucket (as its graphed step alone draws them)
        self.names = [name for name, _ in template.named_parameters()]
        self.shapes = [parameter.shape for _, parameter in template.named_parameters()]
        self.base, self.queue = masked_model(template)
        self.base.train()
        self.draws = DropoutDraws(template)

    def losses(self, models: Sequence[nn.Module], batches: Sequence[Batch], randomness: Sequence[RunRandomness]) -> Tensor:
        """ℓ_k of each model on its batch, its masks drawn under its ``randomness``: (K,), differentiable
        with respect to each model's own parameters."""
        for model in models:
            if [parameter.shape for _, parameter in model.named_parameters()] != self.shapes:
                raise StacklmError("the runs of one step must share their architecture: their parameters differ in shape")
        device = batches[0].inputs.device
        shapes = [self._drawn_shape(batch) for batch in batches]  # each run's (B_k, n_k), or its bucket
        batch_size = max(size for size, _ in shapes)
        length = max(length for _, length in shapes)
        inputs = torch.full((len(batches), batch_size, length), PADDING_INPUT, dtype=torch.long, device=device)  # (K, B, n)
        targets = torch.zeros((len(batches), batch_size, length + 1), dtype=torch.long, device=device)  # (K, B, n + 1)
        scored = torch.zeros((len(batches), batch_size, length + 1), dtype=torch.bool, device=device)  # (K, B, n + 1)
        for run, batch in enumerate(batches):
            inputs[run, : batch.size, : batch.inputs.size(1)] = batch.inputs
            targets[run, : batch.size, : batch.targets.size(1)] = batch.targets
            scored[run, : batch.size, : batch.mask.size(1)] = batch.mask
        sizes = torch.tensor([float(batch.size) for batch in batches], device=device)  # (K,)
        padded_draws = self.draws(batch_size, length)
        per_run = []
        for shape, run_randomness in zip(shapes, randomness):
            with run_randomness.active():
                per_run.append(padded(draw_masks(self.draws(*shape), device), padded_draws))
        masks = [torch.stack(draw) for draw in zip(*per_run)]  # per draw, (K, *padded shape)
        own = [dict(model.named_parameters()) for model in models]
        parameters = {name: torch.stack([run[name] for run in own]) for name in self.names}  # (K, …) each
        buffers = dict(models[0].named_buffers())  # the same in every run of an architecture (the +Syn feature table)
        return vmap(functools.partial(self._loss, buffers=buffers))(parameters, inputs, targets, scored, sizes, masks)

    def _drawn_shape(self, batch: Batch) -> tuple[int, int]:
        size, length = batch.inputs.shape
        return (bucket_size(size), bucket_size(length)) if self.bucketed else (size, length)

    def _loss(
        self, parameters: dict[str, Tensor], inputs: Tensor, targets: Tensor, scored: Tensor, size: Tensor, masks: list[Tensor], buffers: dict[str, Tensor]
    ) -> Tensor:
        """ℓ of one run (inside ``vmap``): inputs (B, n), targets and scored (B, n + 1), its B_k, its padded masks."""
        self.queue.masks = list(masks)
        model = functools.partial(functional_call, self.base, (parameters, buffers))
        strings = position_log_probabilities(model, inputs, targets).masked_fill(~scored, 0.0).sum(dim=1)  # (B,)
        if self.queue.masks:
            raise StacklmError("the grouped forward called dropout less often than the forward it was recorded from")
        return -strings.sum() / size
