"""Root-cause diagnoses: one module per family of hypotheses, each replayed to prove or reject it."""
