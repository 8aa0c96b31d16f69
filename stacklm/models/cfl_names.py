"""The registry names of the CFL models of DuSell & Chiang (2022) (§4, App. 8), without torch: the
DAG lists them and checks the ``cfl`` settings against them before any job imports a model."""

from __future__ import annotations

from typing import Literal, get_args

CFL_PREFIX = "cfl/"  # so that cfl/LSTM and the Bearing LSTM are different registry entries
CflStack = Literal["Gref", "JM", "NS", "NS+S", "NS+U", "NS+S+U"]
CFL_STACKS: tuple[CflStack, ...] = get_args(CflStack)
CFL_MODELS: tuple[str, ...] = (CFL_PREFIX + "LSTM", *(CFL_PREFIX + stack for stack in CFL_STACKS))  # the figures' order
