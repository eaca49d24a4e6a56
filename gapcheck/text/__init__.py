"""Text models: the same raw strings through the training, validation and serving tokenizers.

``audit_text(samples, stages)`` hashes what each stage feeds the model (SHA256 of the canonical ids, mask and
type ids, :func:`gapcheck.tensors.fingerprint`), joins the stages by sample, finds the first differing token of
each differing sample with the characters it comes from, names the root cause (registered codes of the
``preprocess-audit (text)`` family, :mod:`gapcheck.codes.text`), and gives per-stage statistics with KS drift between stages.

Modules, top down: ``audit`` (the flow) → ``analysis`` (findings and report rows) → ``shard`` (one chunk through
every stage) → ``diagnose`` (first divergence and root cause) → ``stages`` (hf: recipes and callables) and
``samples`` (readers). ``result`` (with its views) is the report contract; ``cli_bridge`` is what the CLI calls.
Importing this package imports neither transformers nor tokenizers.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gapcheck.text.audit import audit_text
    from gapcheck.text.result import TextAuditResult

__all__ = ["audit_text", "TextAuditResult"]


def __getattr__(name: str) -> Any:
    if name == "audit_text":
        from gapcheck.text.audit import audit_text

        return audit_text
    if name == "TextAuditResult":
        from gapcheck.text.result import TextAuditResult

        return TextAuditResult
    raise AttributeError(name)
