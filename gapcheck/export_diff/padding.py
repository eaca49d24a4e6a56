"""Padding invariance: the same sequences, padded differently, must give the same answers.

The gap this finds appears in deployment, not in training: a server's dynamic batcher pads
requests to the longest one, a tokenizer pads on the other side, an attention mask is dropped
on the way to the server. The check, per backend:

1. **Reference**: each of ``n`` seeded sequences run alone at its own length (no padding, mask of
   ones) through *torch*. Every backend is compared with this one reference.
2. **Variants**: all sequences batched together, padded to each length in ``lengths`` on each
   side in ``sides`` (mask set accordingly) — the way a dynamic batcher pads. Outputs whose first
   two axes are (batch, padded length) are compared at the valid positions; outputs with a batch
   axis only (pooled, logits) are compared whole. ``padding_dependence`` names the worst variant,
   output and positions; on torch the first module where the difference appears is found with
   hooks (layer by layer, as for any gap).
3. **Mask**: the longest variant again with an all-ones mask. If padding changes the unmasked
   outputs but the real mask changes nothing, the mask is ignored (``mask_ignored``).

A backend that refuses a padded length (an ONNX graph with a fixed sequence axis) is reported
as ``padding_not_checked`` for that variant, never as a gap. Cost: one forward per sequence for
the reference, then one batched forward per variant and backend (no re-export).

What is refused (:class:`~gapcheck.errors.UsageError`, exit 2) rather than silently passed:

- padded lengths above :data:`PAD_LENGTH_FACTOR` times the declared sequence length (and above
  :data:`MAX_PADDED_LENGTH`), before anything is allocated; the padded batch is also checked against
  :mod:`gapcheck.limits`. Duplicate lengths and sides are run once; lengths run in increasing order.
- padded lengths all shorter than the longest generated sequence (nothing could be padded): the
  message names them and the shortest usable length. When only some are too short, the others run
  and the dropped ones are stated in an info ``padding_not_checked`` finding.
- a token input that is not a 2-D integer sequence input, or that is the mask input itself.

torch is the reference: a torch failure on the unpadded sequences or on a padded variant is an
error (:class:`~gapcheck.errors.BackendError`, exit 3; exit 2 when the padded length is beyond
the declared sequence length, i.e. the length asked for is the likely cause), never an info
``padding_not_checked``. Only the other backends' refusals are info. A check that compared no
variant at all raises instead of reporting a pass.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from gapcheck.codes.padding import MASK_IGNORED, PADDING_DEPENDENCE, PADDING_NOT_CHECKED
from gapcheck.compare import Tolerance, TolerancePolicy, compare_arrays
from gapcheck.errors import BackendError, GapcheckError, UsageError
from gapcheck.findings import Finding, Subject
from gapcheck.report.contract import Check, ResultBase, Table

Feeds = dict[str, np.ndarray]
RunFn = Callable[[Feeds], Mapping[str, np.ndarray]]
SIDES = ("right", "left")
MAX_PADDED_LENGTH = 1 << 16
#: A padded length may be at most this many times the declared sequence length (the input spec's T): padding
#: far beyond what the model was declared with only measures how much memory attention over it needs.
PAD_LENGTH_FACTOR = 4


@dataclass(frozen=True)
class PadOptions:
    token_input: str
    mask_input: str | None
    max_length: int
    lengths: tuple[int, ...] = ()  # padded lengths; default: three lengths up to max_length
    sides: tuple[str, ...] = ("right",)
    n_sequences: int = 4
    seed: int = 0
    pad_id: int = 0
    token_range: tuple[int, int] = (1, 100)
    # the run's tolerance policy: per output (and per module when localizing), dtype defaults, overrides
    tolerance: TolerancePolicy = field(default_factory=TolerancePolicy)

    def __post_init__(self) -> None:
        bad = [s for s in self.sides if s not in SIDES]
        if bad:
            raise UsageError(f"padding side must be one of {', '.join(SIDES)}, not {', '.join(bad)}")
        if self.max_length < 4:
            raise UsageError(f"padding needs a sequence length of at least 4, got {self.max_length}")
        if not self.token_input:
            raise UsageError("the padding check needs a token input name", parameter="pad_inputs")
        if self.mask_input is not None and (not self.mask_input or self.mask_input == self.token_input):
            raise UsageError(f"the padding check's token and mask inputs must be two different inputs, got "
                             f"{self.token_input!r} and {self.mask_input!r}", parameter="pad_inputs")
        if any(length < 1 or length > MAX_PADDED_LENGTH for length in self.lengths):
            raise UsageError(f"padded lengths must be between 1 and {MAX_PADDED_LENGTH}: {self.lengths}",
                             parameter="pad_lengths")
        cap = self.length_cap
        too_long = sorted({length for length in self.lengths if length > cap})
        if too_long:
            raise UsageError(f"padded length(s) {', '.join(map(str, too_long))} are longer than {cap}, "
                             f"{PAD_LENGTH_FACTOR}x the declared sequence length {self.max_length}",
                             hint="declare a longer sequence input (e.g. ids:1xT) to pad further",
                             parameter="pad_lengths")
        if self.n_sequences < 1:
            raise UsageError("padding needs at least one sequence")
        # each length and side runs once (no duplicate variants or JUnit cases), lengths shortest first
        object.__setattr__(self, "lengths", tuple(sorted(set(self.lengths))))
        object.__setattr__(self, "sides", tuple(dict.fromkeys(self.sides)))

    @property
    def length_cap(self) -> int:
        """The longest padded length accepted: :data:`PAD_LENGTH_FACTOR` x the declared length, at most
        :data:`MAX_PADDED_LENGTH`."""
        return min(MAX_PADDED_LENGTH, PAD_LENGTH_FACTOR * self.max_length)

    def padded_lengths(self, longest: int) -> tuple[int, ...]:
        """The lengths to run for sequences up to ``longest``: those that can pad them (see :meth:`dropped_lengths`)."""
        chosen = self.lengths or tuple(sorted({(longest + self.max_length) // 2, self.max_length}))
        return tuple(length for length in chosen if length >= longest)

    def dropped_lengths(self, longest: int) -> tuple[int, ...]:
        """The asked lengths shorter than ``longest``: they cannot pad the sequences and are not run."""
        return tuple(length for length in self.lengths if length < longest)


@dataclass(frozen=True)
class Variant:
    backend: str
    side: str
    length: int
    masked: bool = True
    max_abs: float | None = None  # None: not run
    worst_output: str = ""
    worst_sample: int = -1
    positions: tuple[int, ...] = ()
    passed: bool = True
    note: str = ""


@dataclass(frozen=True)
class PaddingResult(ResultBase):
    variants: tuple[Variant, ...] = ()
    findings: tuple[Finding, ...] = ()
    sequence_lengths: tuple[int, ...] = ()
    command: str = "pad-check"
    # asked lengths shorter than the longest sequence, not run (in the JSON report: the info finding's evidence)
    dropped_lengths: tuple[int, ...] = ()
    first_module: dict[str, str] = field(default_factory=dict)  # backend -> first diverging module (torch only)

    @property
    def headline(self) -> str:
        gaps = [f for f in self.findings if f.is_gap]
        if not gaps:
            run = sum(1 for v in self.variants if v.max_abs is not None)
            return f"padding-invariant on {run} variant(s) of {len(self.sequence_lengths)} sequences"
        return gaps[0].message

    def sections(self) -> dict[str, Any]:
        return {"padding": {"sequence_lengths": list(self.sequence_lengths),
                            # passed is null for a variant that did not run: nothing was compared, so nothing passed
                            "variants": [{**v.__dict__, "passed": None if v.max_abs is None else v.passed}
                                         for v in self.variants],
                            "first_module": dict(self.first_module)}}

    def views(self) -> Sequence[Table]:
        rows = tuple((v.backend, v.side, v.length, "yes" if v.masked else "all ones",
                      "—" if v.max_abs is None else f"{v.max_abs:.3g}", v.worst_output,
                      "skipped" if v.max_abs is None else ("ok" if v.passed else "DIFFERS"), v.note)
                     for v in self.variants)
        failing = tuple(i for i, v in enumerate(self.variants) if not v.passed and v.masked)
        return (Table("Padding invariance", ("backend", "side", "padded to", "mask", "max |err|", "output",
                                             "verdict", "note"), rows, highlight=failing),)

    def checks(self) -> Sequence[Check]:
        """One JUnit case per padded variant and backend (the all-ones-mask probes are evidence, not cases)."""
        cases = []
        for v in self.variants:
            if not v.masked:
                continue
            name = f"{v.backend}:pad {v.side} to {v.length}"
            if v.max_abs is None:
                cases.append(Check(name, "export_diff.padding", skipped=v.note or "not run"))
            else:
                failure = None if v.passed else f"{v.worst_output} of sample {v.worst_sample} differs, max |err| {v.max_abs:.3g}"
                cases.append(Check(name, "export_diff.padding", failure, f"max_abs={v.max_abs:.3g}"))
        return cases


def _sequences(options: PadOptions, base: Feeds) -> tuple[list[Feeds], list[int]]:
    """n seeded unpadded sequences (batch 1), lengths between a quarter and a half of the max length."""
    rng = np.random.default_rng(options.seed)
    low, high = max(2, options.max_length // 4), max(3, options.max_length // 2)
    lengths = [int(n) for n in rng.integers(low, high + 1, options.n_sequences)]
    sequences = []
    for length in lengths:
        feeds = {}
        for name, array in base.items():
            if _is_sequence(array, options.max_length):
                feeds[name] = np.ascontiguousarray(array[:1, :length])
            else:
                feeds[name] = array
        tokens = rng.integers(*options.token_range, size=(1, length))
        # A real token equal to the pad id would be padding to the model (RoBERTa counts positions past it):
        # move it to the next id in range, so every drawn token is a real one.
        first, stop = options.token_range
        if first <= options.pad_id < stop and stop - first > 1:
            tokens = np.where(tokens == options.pad_id, first + (options.pad_id - first + 1) % (stop - first), tokens)
        feeds[options.token_input] = tokens.astype(base[options.token_input].dtype)
        if options.mask_input:
            feeds[options.mask_input] = np.ones((1, length), dtype=base[options.mask_input].dtype)
        sequences.append(feeds)
    return sequences, lengths


def _is_sequence(array: np.ndarray, max_length: int) -> bool:
    return array.ndim >= 2 and array.shape[1] == max_length


def _valid(length: int, padded: int, side: str) -> slice:
    return slice(0, length) if side == "right" else slice(padded - length, padded)


def _pad_batch(sequences: list[Feeds], lengths: list[int], padded: int, side: str, options: PadOptions,
               masked: bool = True) -> Feeds:
    batch: Feeds = {}
    for name in sequences[0]:
        first = sequences[0][name]
        if first.ndim < 2 or first.shape[1] != lengths[0]:  # not a sequence input: repeat it per row
            batch[name] = np.concatenate([s[name] for s in sequences], axis=0)
            continue
        fill = options.pad_id if name == options.token_input else 0
        rows = np.full((len(sequences), padded, *first.shape[2:]), fill, dtype=first.dtype)
        for row, (seq, length) in enumerate(zip(sequences, lengths)):
            rows[row, _valid(length, padded, side)] = seq[name][0]
        batch[name] = rows
    if options.mask_input:
        mask = np.zeros((len(sequences), padded), dtype=sequences[0][options.mask_input].dtype)
        for row, length in enumerate(lengths):
            mask[row, _valid(length, padded, side) if masked else slice(None)] = 1
        batch[options.mask_input] = mask
    return batch


def _row_view(output: np.ndarray, row: int, length: int, padded: int, side: str, per_position: bool) -> np.ndarray:
    if per_position and output.ndim >= 2 and output.shape[1] == padded:
        return output[row:row + 1, _valid(length, padded, side)]
    return output[row:row + 1]


def _per_position(name: str, references: list[Mapping[str, np.ndarray]], lengths: list[int]) -> bool:
    """An output is per position when, run alone, its axis 1 follows each sequence's own length (not a pooled one
    whose width happens to equal a length)."""
    shapes = [reference[name].shape for reference in references]
    return all(len(shape) >= 2 and shape[1] == length for shape, length in zip(shapes, lengths)) and (
        len(set(lengths)) > 1 or len(shapes) == 1)


def _compare_variant(outputs: Mapping[str, np.ndarray], references: list[Mapping[str, np.ndarray]],
                     lengths: list[int], padded: int, side: str, policy: TolerancePolicy
                     ) -> tuple[float, str, int, bool]:
    worst, worst_output, worst_row, passed = 0.0, "", -1, True
    for name, output in outputs.items():
        per_position = _per_position(name, references, lengths)
        for row, (reference, length) in enumerate(zip(references, lengths)):
            expected = reference[name]
            tol = policy.for_name(name, expected.dtype)
            actual = _row_view(output, row, length, padded, side, per_position)
            if actual.shape != expected.shape:
                return float("inf"), name, row, False
            stats = compare_arrays(actual.astype(np.float64), expected.astype(np.float64), tol)
            if stats.max_abs > worst or (not stats.passed and passed):
                worst, worst_output, worst_row = stats.max_abs, name, row
            passed = passed and stats.passed
    return worst, worst_output, worst_row, passed


def _differs_positions(output: np.ndarray, reference: np.ndarray, length: int, padded: int, side: str,
                       row: int, tol: Tolerance) -> tuple[int, ...]:
    actual = _row_view(output, row, length, padded, side, True)
    if actual.ndim < 2 or actual.shape != reference.shape or actual.shape[1] != length:
        return ()
    err = np.abs(actual.astype(np.float64) - reference.astype(np.float64))
    bound = tol.atol + tol.rtol * np.abs(reference.astype(np.float64))
    bad = (err > bound).reshape(1, length, -1).any(axis=(0, 2))
    return tuple(int(i) for i in np.flatnonzero(bad)[:16])


def check_padding(
    options: PadOptions,
    base: Feeds,
    torch_run: RunFn,
    backends: Mapping[str, RunFn] | None = None,
    localize: Callable[[Feeds, list[Feeds], list[int], int, str], str | None] | None = None,
) -> PaddingResult:
    """Run the padding check; ``torch_run`` is the reference, ``backends`` the others (name -> run)."""
    validate_inputs(options, base)
    sequences, lengths = _sequences(options, base)
    longest = max(lengths)
    padded_lengths = options.padded_lengths(longest)
    dropped = options.dropped_lengths(longest)
    if not padded_lengths:
        raise UsageError(f"padded length(s) {', '.join(map(str, dropped))} are shorter than the longest generated "
                         f"sequence ({longest}): nothing would be padded; use lengths of at least {longest}",
                         hint=f"lengths from {max(3, options.max_length // 2)} to {options.length_cap} fit any seed",
                         parameter="pad_lengths")
    _check_batch_size(options, sequences, lengths, padded_lengths[-1])
    references = []
    for seq, length in zip(sequences, lengths):
        try:
            references.append(dict(torch_run(seq)))
        except GapcheckError as exc:
            raise BackendError(f"the padding check's reference failed: torch on one unpadded sequence of length "
                               f"{length}: {_first_line(exc)}",
                               hint="the padding check needs a model that runs on sequences shorter than the "
                                    "declared length") from exc
    runs: dict[str, RunFn] = {"torch": torch_run, **dict(backends or {})}
    variants: list[Variant] = []
    findings: list[Finding] = []
    if dropped:
        findings.append(PADDING_NOT_CHECKED.finding(
            f"padded length(s) {', '.join(map(str, dropped))} not run on any backend: shorter than the longest "
            f"generated sequence ({longest}), they cannot pad it",
            subject=Subject(step="pad to " + ", ".join(map(str, dropped))),
            evidence={"dropped_lengths": list(dropped), "longest_sequence": longest}))
    first_module: dict[str, str] = {}
    for backend, run in runs.items():
        found, checked = _run_backend(backend, run, sequences, lengths, padded_lengths, options, references,
                                      (lambda *args: localize(base, *args)) if localize and backend == "torch" else None)
        variants += checked
        findings += found
        first = next((f.subject.module or "" for f in found if f.code == PADDING_DEPENDENCE.code), None)
        if first is not None:
            first_module[backend] = first
    if not any(v.max_abs is not None for v in variants):  # unreachable while torch failures raise; never a pass
        raise BackendError("the padding check compared no padded variant on any backend")
    return PaddingResult(variants=tuple(variants), findings=tuple(_one_per_backend(findings)),
                         sequence_lengths=tuple(lengths), dropped_lengths=dropped, first_module=first_module)


def _run_backend(backend: str, run: RunFn, sequences: list[Feeds], lengths: list[int], padded_lengths: Sequence[int],
                 options: PadOptions, references: list[Mapping[str, np.ndarray]],
                 localize: Callable[[list[Feeds], list[int], int, str], str | None] | None
                 ) -> tuple[list[Finding], list[Variant]]:
    """Every padded variant and the mask check on one backend: its findings (the first padding dependence localized
    with ``localize``) and variants. A torch variant that fails raises (see :func:`_reference_failed`)."""
    seen: dict[tuple[str, int], Mapping[str, np.ndarray]] = {}  # the mask check reuses a masked variant's outputs
    variants: list[Variant] = []
    findings: list[Finding] = []
    for side in options.sides:
        for padded in padded_lengths:
            variant, batch_outputs = _run_variant(backend, run, sequences, lengths, padded, side, options, references)
            if variant.max_abs is None and backend == "torch":
                _reference_failed(options, padded, side, variant.note)
            variants.append(variant)
            seen[(side, padded)] = batch_outputs
            if variant.max_abs is None:
                findings.append(PADDING_NOT_CHECKED.finding(
                    f"{backend}: padded length {padded} ({side}) not run: {variant.note}",
                    subject=Subject(endpoint=backend, step=f"pad {side} to {padded}"),
                    evidence={"side": side, "length": padded, "reason": variant.note}))
                continue
            if not variant.passed and not any(f.code == PADDING_DEPENDENCE.code for f in findings):
                module = localize(sequences, lengths, padded, side) if localize else None
                findings.append(_dependence_finding(variant, module, batch_outputs, references, lengths, options))
    findings.extend(_mask_findings(backend, run, sequences, lengths, options, references, seen))
    return findings, variants


def validate_inputs(options: PadOptions, base: Feeds) -> None:
    """Refuse (UsageError) token/mask inputs the check cannot use, before anything runs."""
    names = ", ".join(sorted(base))
    if options.token_input not in base:
        raise UsageError(f"the token input {options.token_input!r} is not among the model inputs ({names})",
                         parameter="pad_inputs")
    if options.mask_input is not None and options.mask_input not in base:
        raise UsageError(f"the mask input {options.mask_input!r} is not among the model inputs ({names})",
                         parameter="pad_inputs")
    token = base[options.token_input]
    if token.ndim != 2 or not np.issubdtype(token.dtype, np.integer):
        raise UsageError(f"the padding check's token input {options.token_input!r} must be an integer sequence of "
                         f"shape 1xT (token ids), got {token.dtype} of shape {'x'.join(map(str, token.shape))}",
                         parameter="pad_inputs")
    if token.shape[1] != options.max_length:
        raise UsageError(f"the token input {options.token_input!r} has length {token.shape[1]}, the padding check "
                         f"was set up for {options.max_length}", parameter="pad_inputs")
    if options.mask_input is not None:
        mask = base[options.mask_input]
        if mask.ndim != 2 or mask.shape[1] != token.shape[1]:
            raise UsageError(f"the mask input {options.mask_input!r} must be a 1xT sequence like the token input "
                             f"{options.token_input!r} (1x{token.shape[1]}), got shape "
                             f"{'x'.join(map(str, mask.shape))}", parameter="pad_inputs")


def _check_batch_size(options: PadOptions, sequences: list[Feeds], lengths: list[int], padded: int) -> None:
    """The largest padded batch against :mod:`gapcheck.limits`, before it is built."""
    from gapcheck.limits import check_elements

    for name, first in sequences[0].items():
        if first.ndim >= 2 and first.shape[1] == lengths[0]:
            count = len(sequences) * padded * int(np.prod(first.shape[2:], dtype=np.int64))
            check_elements(count, f"the padded batch's input {name!r} ({len(sequences)} sequences padded to {padded})")


def _first_line(exc: GapcheckError) -> str:
    return exc.message.splitlines()[0][:300]


def _reference_failed(options: PadOptions, padded: int, side: str, note: str) -> None:
    """torch, the reference, failed on a padded variant: an error, never an info "not checked"."""
    what = f"torch (the reference) failed on the sequences padded to {padded} ({side}): {note}"
    if padded > options.max_length:
        raise UsageError(f"{what}; {padded} is longer than the declared sequence length {options.max_length}",
                         hint="choose padded lengths the model accepts (e.g. within its position embeddings)",
                         parameter="pad_lengths")
    raise BackendError(what)


def _run_variant(backend: str, run: RunFn, sequences: list[Feeds], lengths: list[int], padded: int, side: str,
                 options: PadOptions, references: list[Mapping[str, np.ndarray]],
                 masked: bool = True) -> tuple[Variant, Mapping[str, np.ndarray]]:
    batch = _pad_batch(sequences, lengths, padded, side, options, masked)
    try:
        outputs = run(batch)
    except GapcheckError as exc:
        return Variant(backend, side, padded, masked, note=exc.message.splitlines()[0][:200]), {}
    worst, name, row, passed = _compare_variant(outputs, references, lengths, padded, side, options.tolerance)
    positions = ()
    if not passed and name:
        expected = references[row][name]
        positions = _differs_positions(outputs[name], expected, lengths[row], padded, side, row,
                                       options.tolerance.for_name(name, expected.dtype))
    return Variant(backend, side, padded, masked, worst, name, row, positions, passed), outputs


def _dependence_finding(variant: Variant, module: str | None, outputs: Mapping[str, np.ndarray],
                        references: list[Mapping[str, np.ndarray]], lengths: list[int], options: PadOptions) -> Finding:
    where = f" — first appears at module {module}" if module else ""
    reference = references[variant.worst_sample].get(variant.worst_output)
    tol = options.tolerance.for_name(variant.worst_output, reference.dtype if reference is not None else "float32")
    positions = f" at valid positions {list(variant.positions)}" if variant.positions else ""
    message = (f"{variant.backend}: padding sequences to {variant.length} on the {variant.side} changes "
               f"output {variant.worst_output!r} of sample {variant.worst_sample} (length {lengths[variant.worst_sample]})"
               f"{positions}, max |err| {variant.max_abs:.3g}{where}")
    return PADDING_DEPENDENCE.finding(
        message, subject=Subject(endpoint=variant.backend, module=module, output=variant.worst_output,
                                 step=f"pad {variant.side} to {variant.length}"),
        evidence={"side": variant.side, "padded_length": variant.length, "sample": variant.worst_sample,
                  "sequence_length": lengths[variant.worst_sample], "output": variant.worst_output,
                  "positions": list(variant.positions), "max_abs": variant.max_abs,
                  "rtol": tol.rtol, "atol": tol.atol, "first_module": module})


def _mask_findings(backend: str, run: RunFn, sequences: list[Feeds], lengths: list[int], options: PadOptions,
                   references: list[Mapping[str, np.ndarray]],
                   masked_outputs: Mapping[tuple[str, int], Mapping[str, np.ndarray]] | None = None) -> list[Finding]:
    """Padding present: does the real mask change anything compared with an all-ones mask?"""
    if options.mask_input is None:
        return []
    padded = options.padded_lengths(max(lengths))[-1:]  # the longest (lengths are sorted)
    if not padded:
        return []
    side = options.sides[0]
    unmasked, unmasked_out = _run_variant(backend, run, sequences, lengths, padded[0], side, options, references,
                                          masked=False)
    if unmasked.max_abs is None or unmasked.passed:
        return []  # padding does not matter even unmasked (e.g. right padding in a causal model): nothing to prove
    masked_out = (masked_outputs or {}).get((side, padded[0])) or run(_pad_batch(sequences, lengths, padded[0], side,
                                                                               options))
    identical = all(np.array_equal(masked_out[name], unmasked_out[name]) for name in masked_out)
    if not identical:
        return []
    return [MASK_IGNORED.finding(
        f"{backend}: outputs are identical with the real mask and with an all-ones mask, although padding to "
        f"{padded[0]} ({side}) changes them (max |err| {unmasked.max_abs:.3g}): the mask input is ignored",
        subject=Subject(endpoint=backend, step=f"pad {side} to {padded[0]}"),
        evidence={"side": side, "padded_length": padded[0], "unmasked_max_abs": unmasked.max_abs})]


def _one_per_backend(findings: list[Finding]) -> list[Finding]:
    """One padding_dependence per backend (the first, worst-localized one); every other finding kept."""
    seen: set[tuple[str, str | None]] = set()
    kept = []
    for finding in findings:
        key = (finding.code, finding.subject.endpoint)
        if finding.code == PADDING_DEPENDENCE.code and key in seen:
            continue
        seen.add(key)
        kept.append(finding)
    return kept


def torch_localizer(module: Any, input_names: Sequence[str], output_names: Sequence[str], policy: TolerancePolicy
                    ) -> Callable[[Feeds, list[Feeds], list[int], int, str], str | None]:
    """The first module (execution order) whose output at the valid positions differs under padding (torch hooks)."""
    from gapcheck.backends.torch_eager import TorchBackend

    backend = TorchBackend(module, input_names, output_names)
    paths = [path for path, _ in module.named_modules() if path]

    def localize(base: Feeds, sequences: list[Feeds], lengths: list[int], padded: int, side: str) -> str | None:
        batch = _pad_batch_like(sequences, lengths, padded, side, input_names)
        padded_capture = backend.capture(batch, modules=paths)
        for row, (seq, length) in enumerate(zip(sequences, lengths)):
            alone = backend.capture(seq, modules=paths)
            order = sorted(paths, key=lambda p: padded_capture.modules[p].order if p in padded_capture.modules else 1 << 40)
            for path in order:
                got, want = padded_capture.modules.get(path), alone.modules.get(path)
                if got is None or want is None or got.output is None or want.output is None:
                    continue
                per_position = want.output.ndim >= 2 and want.output.shape[1] == length
                view = _row_view(got.output, row, length, padded, side, per_position)
                if view.shape != want.output.shape:
                    continue
                tol = policy.for_name(path, want.output.dtype)
                if not compare_arrays(view.astype(np.float64), want.output.astype(np.float64), tol).passed:
                    return path
        return None

    return localize


def _pad_batch_like(sequences: list[Feeds], lengths: list[int], padded: int, side: str,
                    input_names: Sequence[str]) -> Feeds:
    """Pad every sequence input with zeros; a 0/1 input that is all ones per sequence is treated as the mask."""
    batch: Feeds = {}
    for name in input_names:
        first = sequences[0][name]
        if first.ndim < 2 or first.shape[1] != lengths[0]:
            batch[name] = np.concatenate([s[name] for s in sequences], axis=0)
            continue
        rows = np.zeros((len(sequences), padded, *first.shape[2:]), dtype=first.dtype)
        for row, (seq, length) in enumerate(zip(sequences, lengths)):
            rows[row, _valid(length, padded, side)] = seq[name][0]
        batch[name] = rows
    return batch
