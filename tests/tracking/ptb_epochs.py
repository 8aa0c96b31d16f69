"""A PTB run's epoch as the shared loop records it (``CheckpointRecord``: a checkpoint at each
epoch's end), from the numbers a PTB curve shows: η, the training NLL per target, the validation
perplexity (stored as its logarithm, the cross-entropy) and the best flag."""

import math

from stacklm.training.run_state import CheckpointRecord


def ptb_epoch(epoch: int, learning_rate: float, train_nll: float, perplexity: float, is_best: bool) -> CheckpointRecord:
    return CheckpointRecord(
        checkpoint=epoch, epoch=epoch, step=10 * epoch, examples_seen=320 * epoch, learning_rate_used=learning_rate,
        train_loss=train_nll, validation_cross_entropy=math.log(perplexity), is_best=is_best,
    )


def shown(perplexity: float) -> float:
    """The validation perplexity a curve shows for ``ptb_epoch``'s: exp(log(perplexity)), to the last bit."""
    return math.exp(math.log(perplexity))
