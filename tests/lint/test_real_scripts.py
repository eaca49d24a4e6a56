"""False alarms on real training scripts: the example scripts shipped inside installed packages.

Every finding on these scripts was reviewed by hand (docs/lint.md lists them); a new finding here
is either a regression of precision or a new true positive to review — either way this test says so.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from gapcheck.lint import Selection, lint_paths

#: (package, folder inside it) -> reviewed findings as (path relative to site-packages, line, code)
CORPUS = {
    "ray": ("train/examples", "train/v2/examples", "tune/examples"),
    "accelerate": ("test_utils/scripts",),
}
REVIEWED = {
    # GC601 true positives: the entry point (or the train function it launches) trains with no seed at all.
    ("accelerate/test_utils/scripts/external_deps/test_ds_multiple_model.py", 330, "GC601"),  # config["seed"] never used
    ("accelerate/test_utils/scripts/test_merge_weights.py", 128, "GC601"),
    # Lightning examples under Tune: trainer.fit with no pl.seed_everything; seen once a project class's
    # constructor is followed (the LightningModule's __init__ builds its layers from torch's unseeded RNG).
    ("ray/tune/examples/mnist_ptl_mini.py", 154, "GC601"),
    ("ray/tune/examples/mlflow_ptl.py", 88, "GC601"),
    ("ray/train/examples/pytorch/torch_data_prefetch_benchmark/auto_pipeline_for_host_to_device_data_transfer.py",
     122, "GC601"),
    # (torch_fashion_mnist_example.py was listed here by mistake: its train_func calls
    # ray.train.torch.enable_reproducibility(), which seeds torch, random and numpy; test_seeded_examples_stay_quiet)
    ("ray/train/examples/pytorch/torch_linear_example.py", 110, "GC601"),
    ("ray/train/examples/pytorch/torch_quick_start.py", 92, "GC601"),
    ("ray/train/examples/pytorch/torch_regression_example.py", 128, "GC601"),
    ("ray/train/examples/pytorch_geometric/distributed_sage_example.py", 186, "GC601"),
    ("ray/train/v2/examples/pytorch/torchft_linear_example.py", 195, "GC601"),
    ("ray/tune/examples/cifar10_pytorch.py", 267, "GC601"),
    ("ray/tune/examples/mnist_pytorch.py", 121, "GC601"),
    ("ray/tune/examples/pbt_dcgan_mnist/pbt_dcgan_mnist_func.py", 130, "GC601"),
    # GC403 true positive: validate_epoch() calls model.eval(), train_epoch() never calls model.train().
    ("ray/train/examples/pytorch/torch_linear_example.py", 83, "GC403"),
    # GC502 true positive: the MNIST test loader is built with shuffle=True.
    ("ray/tune/examples/mnist_pytorch.py", 86, "GC502"),
    # GC801 true positives: checkpoints restored with torch.load(path) and no weights_only=True.
    ("ray/tune/examples/cifar10_pytorch.py", 100, "GC801"),
    ("ray/tune/examples/cifar10_pytorch.py", 199, "GC801"),
    ("ray/tune/examples/mnist_pytorch_trainable.py", 62, "GC801"),
    ("ray/tune/examples/pbt_convnet_example.py", 56, "GC801"),
    ("ray/tune/examples/pbt_convnet_function_example.py", 39, "GC801"),
    ("ray/tune/examples/pbt_convnet_function_example.py", 73, "GC801"),
    ("ray/tune/examples/pbt_dcgan_mnist/common.py", 270, "GC801"),
    ("ray/tune/examples/pbt_dcgan_mnist/pbt_dcgan_mnist_func.py", 57, "GC801"),
    ("ray/tune/examples/pbt_dcgan_mnist/pbt_dcgan_mnist_func.py", 151, "GC801"),
    ("ray/tune/examples/pbt_dcgan_mnist/pbt_dcgan_mnist_trainable.py", 85, "GC801"),
    ("ray/tune/examples/pbt_dcgan_mnist/pbt_dcgan_mnist_trainable.py", 135, "GC801"),
}


def _package(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _folders() -> tuple[Path, list[Path]]:
    roots = []
    site = None
    for package, subfolders in CORPUS.items():
        base = _package(package)
        if base is None:
            continue
        site = base.parent
        roots += [base / sub for sub in subfolders if (base / sub).is_dir()]
    if site is None or not roots:
        pytest.skip("neither ray nor accelerate is installed (optional extras): "
                    "test_training_code_in_required_packages covers torch and transformers")
    return site, roots


#: Training-loop code inside the packages every install has (torch, transformers from the [test] extra):
#: (path relative to site-packages, code) of every reviewed finding. Line numbers are left out: they move
#: with the pinned versions, the findings do not.
REQUIRED = {
    "torch": ("optim", "amp", "distributed/optim", "nn/parallel/distributed.py", "_inductor/fx_passes/numeric_utils.py"),
    "transformers": ("trainer.py", "trainer_pt_utils.py", "trainer_utils.py", "trainer_seq2seq.py"),
}
REQUIRED_REVIEWED = {
    # the one false alarm of the whole site-packages review (docs/lint.md): a numeric checker that steps a
    # fresh SGD each iteration without zero_grad; the gradients do accumulate, but nobody trains here.
    ("torch/_inductor/fx_passes/numeric_utils.py", "GC803"),
    # true positive: ZeroRedundancyOptimizer's state exchange unpickles with weights_only=False.
    ("torch/distributed/optim/zero_redundancy_optimizer.py", "GC801"),
}


def test_training_code_in_required_packages_raises_only_reviewed_findings() -> None:
    targets = []
    for package, parts in REQUIRED.items():
        base = _package(package)
        assert base is not None, f"{package} is a required dependency"
        targets += [base / part for part in parts if (base / part).exists()]
    site = (_package("torch") or Path()).parent
    result = lint_paths(targets, jobs=1)
    assert not result.errors
    found = {(str(Path(f.subject.path or "").resolve().relative_to(site)), f.code) for f in result.findings}
    assert found - REQUIRED_REVIEWED == set(), "new findings on torch/transformers: review them"
    assert result.files >= 30 and result.lines >= 20_000


#: Former false alarms on installed code, each fixed in its rule (docs/lint.md): they must stay quiet.
FIXED_FALSE_ALARMS = {
    ("facenet_pytorch", "models/utils/training.py", "GC802"),  # loss_batch = loss_batch.detach().cpu(); loss += ...
    ("sentence_transformers", "sentence_transformer/losses/cached_multiple_negatives_ranking.py", "GC802"),
    ("sentence_transformers", "sentence_transformer/losses/cached_gist_embed.py", "GC802"),
    ("sentence_transformers", "sentence_transformer/losses/mega_batch_margin.py", "GC802"),
    ("sentence_transformers", "multi_vector_encoder/losses/cached_multiple_negatives_ranking.py", "GC802"),
    ("timm", "utils/cuda.py", "GC305"),  # try: torch.amp.GradScaler(...) except: torch.cuda.amp.GradScaler()
    ("lightning", "fabric/plugins/precision/amp.py", "GC305"),  # ... if _TORCH_GREATER_EQUAL_2_4 else ...
    ("ray", "train/examples/pytorch/torch_fashion_mnist_example.py", "GC601"),  # enable_reproducibility()
}


@pytest.mark.parametrize(("package", "part", "code"), sorted(FIXED_FALSE_ALARMS))
def test_fixed_false_alarms_on_installed_code_stay_quiet(package: str, part: str, code: str) -> None:
    base = _package(package)
    if base is None or not (base / part).is_file():
        pytest.skip(f"{package} is not installed (an optional extra): the fixtures GC802/ok_rebound.py, "
                    "GC305/ok_fallback.py and GC601/ok_seeds_*.py hold the same code")
    result = lint_paths([base / part], Selection(select=(code,)), jobs=1)
    assert not result.errors and result.lines > 0
    assert [f"{f.subject.line}: {f.message}" for f in result.findings] == []


def test_real_training_scripts_raise_only_reviewed_findings() -> None:
    site, folders = _folders()
    result = lint_paths(folders, jobs=2)
    assert not result.errors
    found = {(str(Path(f.subject.path or "").resolve().relative_to(site)), f.subject.line, f.code)
             for f in result.findings}
    present = {item for item in REVIEWED if (site / item[0]).is_file()}
    assert found - REVIEWED == set(), "new findings on real scripts: review them (false alarm or true positive?)"
    assert present - found == set(), "reviewed true positives no longer found (recall regression)"
    assert result.files >= 60 and result.lines >= 10_000
