"""Training progress on stderr: a tqdm bar on a terminal, plain periodic lines otherwise.

The bar covers one epoch (batches done / in the epoch) and shows the loss and tokens/s; tqdm
gives its ETA. Cluster logs, where stderr is a file, get one line every ``interval_s`` seconds
with the same numbers and the epoch's ETA, and one line per checkpoint. tokens/s is the current
speed: the tokens of the batches since the last line (or the epoch's start) over the time since,
so neither an earlier session nor a checkpoint's scoring, which ends in its line, counts in it.
"""

from __future__ import annotations

import math
import sys
import time
from datetime import timedelta
from typing import Callable, TextIO

from tqdm import tqdm


BAR_LOSS_S = 1.0


def _value(loss: float | Callable[[], float]) -> float:
    return loss() if callable(loss) else loss


class Progress:
    def __init__(self, stream: TextIO | None = None, interval_s: float = 60.0) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.interval_s = interval_s
        self.is_terminal = self.stream.isatty()
        self.bar: tqdm | None = None
        self.epoch = 0
        self.total = 0
        self.done = 0
        self.done_at_start = 0
        self.epoch_start = 0.0
        self.last_line = 0.0
        self.tokens_since_line = 0
        self.bar_loss_at = -math.inf

    def start_epoch(self, epoch: int, done: int, total: int) -> None:
        """Epoch ``epoch`` (1-based) of ``total`` batches, ``done`` of them already (resume)."""
        self.close()
        self.epoch, self.done, self.done_at_start, self.total = epoch, done, done, total
        self.epoch_start = self.last_line = time.monotonic()
        self.tokens_since_line = 0
        self.bar_loss_at = -math.inf
        if self.is_terminal:
            self.bar = tqdm(total=total, initial=done, desc=f"epoch {epoch}", file=self.stream, dynamic_ncols=True, leave=False)

    def update(self, loss: float | Callable[[], float], tokens: int) -> None:
        """One batch done, of ``tokens`` tokens, with training loss ``loss``: the value, or a
        function that reads it, called only when a line or the bar shows it (on CUDA a reading
        waits for the device: the bar shows the loss at most every ``BAR_LOSS_S`` seconds)."""
        self.done += 1
        self.tokens_since_line += tokens
        now = time.monotonic()
        tokens_per_s = self.tokens_since_line / max(now - self.last_line, 1e-9)
        if self.bar is not None:
            if now - self.bar_loss_at >= BAR_LOSS_S or self.done == self.total:
                self.bar_loss_at = now
                self.bar.set_postfix(loss=f"{_value(loss):.4g}", tokens_per_s=f"{tokens_per_s:.0f}", refresh=False)
            self.bar.update(1)
            return
        if now - self.last_line >= self.interval_s or self.done == self.total:
            self.line(f"epoch {self.epoch} batch {self.done}/{self.total} loss {_value(loss):.4g} tokens/s {tokens_per_s:.0f} eta {self.eta(now)}")

    def eta(self, now: float) -> str:
        """Time left in the epoch at the rate of this session's batches."""
        elapsed = now - self.epoch_start
        rate = elapsed / max(1, self.done - self.done_at_start)
        return str(timedelta(seconds=round(rate * (self.total - self.done))))

    def line(self, message: str) -> None:
        """``message`` on its own line; the current speed's window starts again after it."""
        if self.bar is not None:
            self.bar.write(message, file=self.stream)
        else:
            print(message, file=self.stream, flush=True)
        self.last_line = time.monotonic()
        self.tokens_since_line = 0

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
