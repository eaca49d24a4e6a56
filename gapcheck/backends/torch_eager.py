"""torch eager backend: the reference. Runs the module and, on request, captures module outputs with hooks."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Sequence

import numpy as np
import torch
from torch.utils._pytree import tree_flatten

from gapcheck.backends.base import TensorSpec
from gapcheck.errors import BackendError
from gapcheck.model.export import condense_error
from gapcheck.tensors import fingerprint


@dataclass
class ModuleCapture:
    """What one module produced (and, when asked, received) on its last call, in completion order."""

    order: int
    output: np.ndarray | None  # None when the output is not a single tensor
    inputs: tuple[np.ndarray, ...] = ()
    calls: int = 1
    output_count: int = 1


@dataclass
class CaptureResult:
    outputs: dict[str, np.ndarray]
    modules: dict[str, ModuleCapture] = field(default_factory=dict)
    input_fingerprints: dict[str, str] = field(default_factory=dict)  # SHA256 of the tensors forward() received

    def without_arrays(self) -> "CaptureResult":
        """Order, call counts and output counts only: what the report needs after the arrays are compared."""
        return CaptureResult({}, {p: replace(c, output=None, inputs=()) for p, c in self.modules.items()})


def _tensor_leaves(value) -> list[torch.Tensor]:
    return [leaf for leaf in tree_flatten(value)[0] if isinstance(leaf, torch.Tensor)]


def _to_numpy(tensor: torch.Tensor) -> np.ndarray:
    # clone(): in-place ops later in forward (ReLU(inplace=True)) would otherwise change what we captured.
    tensor = tensor.detach().clone()
    if tensor.dtype == torch.bfloat16:
        tensor = tensor.float()
    return tensor.cpu().numpy()


class TorchBackend:
    """Feeds named inputs positionally (in ``input_names`` order) and names outputs after ``output_names``."""

    def __init__(self, module: torch.nn.Module, input_names: Sequence[str], output_names: Sequence[str], name: str = "torch") -> None:
        self.name = name
        self.module = module
        self.input_names = list(input_names)
        self.output_names = list(output_names)
        self.last_input_fingerprints: dict[str, str] = {}

    def input_specs(self) -> list[TensorSpec]:
        return [TensorSpec(n, "unknown", ()) for n in self.input_names]

    def output_specs(self) -> list[TensorSpec]:
        return [TensorSpec(n, "unknown", ()) for n in self.output_names]

    def infer(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        result = self.capture(feeds)
        self.last_input_fingerprints = result.input_fingerprints
        return result.outputs

    def capture(
        self,
        feeds: dict[str, np.ndarray],
        modules: Sequence[str] = (),
        inputs_of: Sequence[str] = (),
        order_of: Sequence[str] = (),
    ) -> CaptureResult:
        """Run once; capture outputs of ``modules``, inputs of ``inputs_of`` and only the execution order of ``order_of``."""
        captures: dict[str, ModuleCapture] = {}
        keep_output = set(modules)
        wanted = keep_output | set(inputs_of) | set(order_of)
        handles = []
        counter = iter(range(1 << 30))

        def make_hook(path: str):
            def hook(mod, args, output):
                leaves = _tensor_leaves(output)
                previous = captures.get(path)
                captures[path] = ModuleCapture(
                    order=next(counter),
                    output=_to_numpy(leaves[0]) if len(leaves) == 1 and path in keep_output else None,
                    inputs=tuple(_to_numpy(t) for t in _tensor_leaves(args)) if path in inputs_of else (),
                    calls=previous.calls + 1 if previous else 1,
                    output_count=len(leaves),
                )

            return hook

        try:
            for path, submodule in self.module.named_modules():
                if path in wanted:
                    handles.append(submodule.register_forward_hook(make_hook(path)))
            args = [torch.from_numpy(np.ascontiguousarray(feeds[n])) for n in self.input_names]
            fed = {n: fingerprint(t) for n, t in zip(self.input_names, args)}
            with torch.no_grad():
                result = self.module(*args)
        except Exception as exc:  # noqa: BLE001 - a model that fails on its own input is a backend failure
            raise BackendError(f"the torch model failed to run: {condense_error(exc)}") from exc
        finally:
            for handle in handles:
                handle.remove()
        leaves = _tensor_leaves(result)
        if len(leaves) != len(self.output_names):
            raise BackendError(
                f"the torch model returned {len(leaves)} tensors, the ONNX graph has {len(self.output_names)} outputs"
            )
        return CaptureResult({n: _to_numpy(t) for n, t in zip(self.output_names, leaves)}, captures, fed)
