"""Root-cause diagnoses: one module per family, each replayed to prove or reject it.

The contract is :class:`~gapcheck.preprocess.diagnoses.base.Diagnosis`; the one list that is
iterated is :data:`~gapcheck.preprocess.diagnoses.catalog.DIAGNOSES`. Stage-level checks
(nondeterminism, the first divergent step of two recipes) live beside them.
"""
