"""``InputSource``: the inputs compared — drawn at random from ``name:shape:dtype`` specs, read from a file, or real
sentences tokenized by one tokenizer stage (``--text-samples FILE[:field] --tokenizer hf:PATH[,...]``)."""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Optional

from gapcheck.errors import UsageError
from gapcheck.groups.base import Group, Opt, check_input_file

RECORD_SAMPLES = 16  # golden record's default number of samples (its declaration and RecordRequest use this one)


@dataclass(frozen=True)
class InputSource(Group):
    specs: tuple[str, ...] = ()
    file: Path | None = None
    num_samples: int = 1
    seed: int = 0
    max_elements: int | None = None  # per drawn input (None: gapcheck.inputs.DEFAULT_MAX_ELEMENTS)
    text_samples: str | None = None
    tokenizer: str | None = None

    OPTIONS: ClassVar[tuple[Opt, ...]] = (
        Opt("specs", "--input", "name:shape:dtype[:low,high], e.g. x:1x3x224x224:float32 (repeatable).", list[str]),
        Opt("file", "--inputs", "Real inputs: .npz or .pt, axis 0 = samples.", Optional[Path]),
        Opt("num_samples", "--num-samples", "Random input draws (ignored with --inputs).", int, key="num_samples",
            low=1),
        Opt("seed", "--seed", "Seed for random inputs.", int, key="seed"),
        Opt("text_samples", "--text-samples", "Real sentences for a text model instead of random ids: lines of a "
            ".txt, FILE.jsonl:field, FILE.csv:column, a folder of .txt; tokenized by --tokenizer, laid out as the "
            "--input specs say (input_ids/attention_mask/token_type_ids by name, else in that order).",
            Optional[str], metavar="FILE[:FIELD]"),
        Opt("tokenizer", "--tokenizer", "The tokenizer stage for --text-samples: hf:PATH[,fast|slow][,max_length=N,"
            "...] (as preprocess-audit's --stage) or module:fn.", Optional[str], metavar="hf:PATH[,...]"),
    )

    def check(self) -> None:
        check_input_file(self.file, "inputs file")
        if self.text_samples is not None or self.tokenizer is not None:
            self._check_text()
        if self.seed is not None and not 0 <= self.seed < 2**32:
            raise UsageError(f"--seed must be in 0..2**32-1, got {self.seed}")  # names its flag: no "(see --seed)" line

    def parsed(self) -> list[Any]:
        from gapcheck.inputs import parse_input_spec

        return [parse_input_spec(text) for text in self.specs]

    def samples(self, *, module: Any = None, onnx_model: Any = None, count: int | None = None) -> list[dict[str, Any]]:
        """The samples: the file's (matched to the model's inputs by name, never by position), else ``count``
        (default ``num_samples``) random draws from the specs, or from the ONNX graph's inputs when none are given."""
        from gapcheck.inputs import DEFAULT_MAX_ELEMENTS, load_samples_file, random_samples

        specs = self.parsed()
        if self.text_samples is not None:
            from gapcheck.text.feed import tokenized_samples

            assert self.tokenizer is not None  # check() refused one without the other
            if not specs and onnx_model is not None:
                specs = specs_from_onnx(onnx_model)
            return tokenized_samples(self.text_samples, self.tokenizer, specs,
                                     self.num_samples if count is None else count)
        if self.file is not None:
            names = [s.name for s in specs] or (forward_input_names(module, onnx_model) if module is not None else None)
            return load_samples_file(self.file, names)
        if not specs:
            if onnx_model is None:
                raise UsageError("give the model's inputs: --input name:shape:dtype (repeatable) or --inputs "
                                 "file.npz|.pt")
            specs = specs_from_onnx(onnx_model)
        return random_samples(specs, self.num_samples if count is None else count, seed=self.seed,
                              max_elements=self.max_elements or DEFAULT_MAX_ELEMENTS)


    def _check_text(self) -> None:
        """--text-samples and --tokenizer go together, not with --inputs; the file, the recipe and integer specs are
        checked before any model is loaded (exit 2)."""
        if self.text_samples is None:
            raise UsageError("--tokenizer is for --text-samples: give the sentences too", parameter="tokenizer")
        if self.file is not None:
            raise UsageError("give --inputs or --text-samples, not both", parameter="text_samples")
        from gapcheck.text.feed import check_text_feed

        check_text_feed(self.text_samples, self.tokenizer, self.parsed())


def specs_from_onnx(model: Any) -> list[Any]:
    """Input specs read off an ONNX graph (dynamic axes become 1), for ``--onnx`` without ``--input``."""
    import onnx

    from gapcheck.inputs import SUPPORTED_DTYPES, InputSpec

    initializers = {i.name for i in model.graph.initializer}
    specs = []
    for value_info in model.graph.input:
        if value_info.name in initializers:
            continue
        tensor_type = value_info.type.tensor_type
        try:
            dtype = str(onnx.helper.tensor_dtype_to_np_dtype(tensor_type.elem_type))
        except KeyError:
            dtype = None
        if dtype not in SUPPORTED_DTYPES:
            raise UsageError(f"cannot draw random values for ONNX input {value_info.name!r}: give --input or --inputs")
        shape = tuple(d.dim_value if d.HasField("dim_value") else 1 for d in tensor_type.shape.dim)
        specs.append(InputSpec(value_info.name, shape, dtype))
    return specs


def forward_input_names(module: Any, onnx_model: Any) -> list[str] | None:
    """The names inputs are fed by, in order: the ONNX graph's inputs, else ``forward``'s positional parameters."""
    if onnx_model is not None:
        initializers = {i.name for i in onnx_model.graph.initializer}
        return [i.name for i in onnx_model.graph.input if i.name not in initializers]
    try:
        parameters = inspect.signature(module.forward).parameters.values()
    except (TypeError, ValueError):  # builtins, TorchScript modules
        return None
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in parameters):
        return None  # forward(*args): positions are all there is
    return [p.name for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty]
