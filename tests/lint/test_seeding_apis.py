"""GC601 and the seeding calls of real libraries: the set-ups new users write first must count as seeding.

One training script, seeded by each library's own call (the new user's ``seeds/`` folder, plus the
calls found by reviewing the installed packages), and its true-positive twins: a seed that leaves
numpy's global generator unseeded, and a library call that seeds nothing.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from gapcheck.lint import Selection, lint_paths

SCRIPT = '''import numpy as np
import torch
{imports}


def main():
    {call}
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(10):
        x = torch.from_numpy(np.random.rand(8, 4)).float()
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
'''

#: (import line, call) that seed torch, numpy and random, some without saying "seed" in their name
SEEDING = {
    "transformers.enable_full_determinism": ("import transformers", "transformers.enable_full_determinism(42)"),
    "transformers.set_seed": ("from transformers import set_seed", "set_seed(42)"),
    "accelerate.set_seed": ("from accelerate.utils import set_seed", "set_seed(42)"),
    "lightning.seed_everything": ("import lightning as L", "L.seed_everything(42, workers=True)"),
    "ray.enable_reproducibility": ("import ray.train.torch", "ray.train.torch.enable_reproducibility(seed=42)"),
    "ignite.manual_seed": ("from ignite.utils import manual_seed", "manual_seed(42)"),
    "timm.random_seed": ("from timm.utils import random_seed", "random_seed(42, 0)"),
}
#: (import line, call, what stays unseeded): the true positives next to them
NOT_SEEDING = {
    "torch.manual_seed": ("import transformers", "torch.manual_seed(42)", ["numpy"]),
    "transformers.logging": ("import transformers", "transformers.logging.set_verbosity_info()", ["numpy", "torch"]),
}


def unseeded(tmp_path: Path, imports: str, call: str) -> list[list[str]]:
    path = tmp_path / "train.py"
    path.write_text(SCRIPT.format(imports=imports, call=call))
    result = lint_paths([path], Selection(select=("GC601",)), jobs=1)
    assert not result.errors
    return [finding.evidence["unseeded"] for finding in result.findings]


@pytest.mark.parametrize("name", sorted(SEEDING))
def test_library_seeders_count_as_seeding(tmp_path: Path, name: str) -> None:
    assert unseeded(tmp_path, *SEEDING[name]) == []


@pytest.mark.parametrize("name", sorted(NOT_SEEDING))
def test_calls_that_do_not_seed_everything_are_reported(tmp_path: Path, name: str) -> None:
    imports, call, missing = NOT_SEEDING[name]
    assert unseeded(tmp_path, imports, call) == [missing]
