"""torch eager backend: the reference. Runs the module and, on request, captures module outputs with hooks.

Outputs are named as the model names them (:func:`gapcheck.model.outputs.named_tensor_leaves`, re-exported
here): ``logits``, ``last_hidden_state``, ``past_key_values.0.key``; a bare tensor is ``output``.

TorchScript modules take no hooks: a ``ScriptModule`` (or one held inside a Python model) is
compared at its outputs only, and :attr:`TorchBackend.unobservable` lists what could not be hooked.
"""
from __future__ import annotations

import copy
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import torch
from torch.utils._pytree import tree_flatten

from gapcheck.backends.base import TensorSpec
from gapcheck.errors import BackendError, condense_error
from gapcheck.model.outputs import named_tensor_leaves
from gapcheck.tensors import contiguous, fingerprint

__all__ = ["CaptureResult", "ModuleCapture", "TorchBackend", "hookable", "named_tensor_leaves"]


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


log = logging.getLogger(__name__)


def _tensor_leaves(value) -> list[torch.Tensor]:
    return [leaf for leaf in tree_flatten(value)[0] if isinstance(leaf, torch.Tensor)]


def hookable(module: torch.nn.Module) -> bool:
    return not isinstance(module, torch.jit.ScriptModule)


def _to_numpy(tensor: torch.Tensor) -> np.ndarray:
    # clone(): in-place ops later in forward (ReLU(inplace=True)) would otherwise change what we captured.
    tensor = tensor.detach().clone()
    if tensor.dtype == torch.bfloat16:
        tensor = tensor.float()
    return tensor.cpu().numpy()


class TorchBackend:
    """Feeds named inputs positionally (in ``input_names`` order) and names outputs after ``output_names`` (none
    given: as the model names them, see :func:`named_tensor_leaves`)."""

    def __init__(self, module: torch.nn.Module, input_names: Sequence[str], output_names: Sequence[str],
                 name: str = "torch") -> None:
        self.name = name
        self.module = module
        self.input_names = list(input_names)
        self.output_names = list(output_names)
        self.last_input_fingerprints: dict[str, str] = {}
        self._fp64_twin: torch.nn.Module | None = None
        self.noise_note = ""  # why no float64 noise floor could be measured, when it could not

    @property
    def unobservable(self) -> list[str]:
        """Module paths whose outputs cannot be captured (TorchScript modules take no hooks)."""
        return [path for path, m in self.module.named_modules() if path and not hookable(m)]

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
                if path in wanted and hookable(submodule):
                    handles.append(submodule.register_forward_hook(make_hook(path)))
            args = [torch.from_numpy(contiguous(feeds[n])) for n in self.input_names]
            fed = {n: fingerprint(t) for n, t in zip(self.input_names, args, strict=True)}
            with torch.no_grad():
                result = self.module(*args)
        except Exception as exc:  # noqa: BLE001 - a model that fails on its own input is a backend failure
            raise BackendError(f"the torch model failed to run: {condense_error(exc)}") from exc
        finally:
            for handle in handles:
                handle.remove()
        named = named_tensor_leaves(result)
        names = self.output_names or [n for n, _ in named]
        if len(named) != len(names):
            raise BackendError(
                f"the torch model returned {len(named)} tensors, the ONNX graph has {len(names)} outputs"
            )
        return CaptureResult({n: _to_numpy(t) for n, (_, t) in zip(names, named, strict=True)}, captures, fed)

    def noise_floor(self, feeds: dict[str, np.ndarray], reference: CaptureResult, modules: Sequence[str]) -> dict[str, float]:
        """max |float32 - float64| per module output and model output: the rounding noise of torch's own fp32 result.

        A float64 copy of the model runs the same inputs (float inputs widened) once; ``reference``
        is the float32 capture of the same feeds. Only scalars are kept. A model that cannot run in
        float64 gives {} and says why in :attr:`noise_note`.
        """
        if not any(np.issubdtype(np.asarray(a).dtype, np.floating) for a in feeds.values()) and not any(
                p.is_floating_point() for p in self.module.parameters()):
            return {}
        noise: dict[str, float] = {}

        def make_hook(path: str):
            def hook(mod, args, output):
                leaves = _tensor_leaves(output)
                ref = reference.modules.get(path)
                if len(leaves) == 1 and ref is not None and ref.output is not None and leaves[0].is_floating_point():
                    wide = leaves[0].detach().cpu().double().numpy()
                    if wide.shape == ref.output.shape:
                        noise[path] = _max_abs_diff(ref.output, wide)
            return hook

        handles = []
        try:
            if self._fp64_twin is None:
                self._fp64_twin = copy.deepcopy(self.module).double()
            wanted = set(modules)
            for path, submodule in self._fp64_twin.named_modules():
                if path in wanted and hookable(submodule):
                    handles.append(submodule.register_forward_hook(make_hook(path)))
            args = [_widen(torch.from_numpy(contiguous(feeds[n]))) for n in self.input_names]
            with torch.no_grad():
                result = self._fp64_twin(*args)
        except Exception as exc:  # noqa: BLE001 - models that build float32 tensors inside forward, deepcopy failures
            self.noise_note = f"the model cannot run in float64 ({condense_error(exc, 160)}): dtype default tolerances only"
            log.debug("no float64 noise floor: %s", exc)
            return {}
        finally:
            for handle in handles:
                handle.remove()
        for name, tensor in zip(self.output_names, [t for _, t in named_tensor_leaves(result)], strict=False):
            ref = reference.outputs.get(name)
            if ref is not None and tensor.is_floating_point() and ref.shape == tuple(tensor.shape):
                noise[name] = _max_abs_diff(ref, tensor.detach().cpu().double().numpy())
        return noise


def _widen(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.double() if tensor.is_floating_point() else tensor


def _max_abs_diff(narrow: np.ndarray, wide: np.ndarray) -> float:
    if not np.issubdtype(narrow.dtype, np.floating):
        return 0.0
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(narrow.astype(np.float64) - wide)
    finite = diff[np.isfinite(diff)]
    return float(finite.max()) if finite.size else 0.0
