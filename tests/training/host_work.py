"""A dispatch mode that records the host work of the code it runs, for the tests of training steps."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

SCALAR_READS = {"aten::_local_scalar_dense", "aten::item"}  # .item(), float(t), int(t), bool(t), if t:
FROM_PYTHON = {"aten::lift_fresh", "aten::lift_fresh_copy"}  # torch.tensor(list), torch.as_tensor(list)
VALUE_SIZED = {"aten::nonzero", "aten::masked_select", "aten::_unique2", "aten::unique_consecutive", "aten::unique_dim"}  # read back on CUDA
COPIES = {"aten::_to_copy", "aten::copy_"}


class HostWork(TorchDispatchMode):
    """Records each op that on CUDA makes the host wait for the device or copies from it: scalar
    reads, tensors built from Python values, copies between devices, and ops whose output size
    depends on values (boolean indexing among them). ``found`` lists them as ``op: detail``.

    A factory called without a device is caught otherwise: run the code under
    ``torch.device("meta")``, where its tensor meets the real ones in an op and raises."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        name = func._schema.name
        if name in SCALAR_READS | FROM_PYTHON | VALUE_SIZED:
            self.found.append(name)
        elif name in COPIES:
            devices = {tensor.device for tensor in _tensors(args, kwargs)} | ({torch.device(kwargs["device"])} if kwargs.get("device") else set())
            if len(devices) > 1:
                self.found.append(f"{name}: {' → '.join(sorted(map(str, devices)))}")
        elif name == "aten::index" and any(tensor.dtype in (torch.bool, torch.uint8) for tensor in _tensors(args[1:], {})):
            self.found.append(f"{name}: a boolean index")
        return func(*args, **kwargs)


def _tensors(args: Any, kwargs: dict[str, Any]) -> list[torch.Tensor]:
    flat = [*args, *kwargs.values()]
    found: list[torch.Tensor] = []
    for item in flat:
        if isinstance(item, torch.Tensor):
            found.append(item)
        elif isinstance(item, (list, tuple)):
            found.extend(_tensors(item, {}))
    return found
