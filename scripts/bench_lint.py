"""Benchmark ``gapcheck lint`` against ``ruff check`` on the same files (a reference point, not a race).

Corpora, side by side in one run:

- **generated**: a training codebase written by this script (>= 100k lines by default): packages of
  models, datasets, train/eval loops, HPO objectives and utilities, with a few planted bugs;
- **real**: the training scripts shipped inside installed packages (ray's train/tune examples,
  accelerate's test scripts, every non-test module of site-packages that calls ``.backward()``);
- **corpus** (``--corpus DIR``): the fetched upstream corpus of ``tests/lint/corpus`` (21 repositories,
  notebooks included).

Each tool runs as a subprocess (start-up included, no cache: ``ruff --no-cache --isolated``), best of
``--rounds``; ruff twice, with its default rules and with ``--select ALL``. Prints lines per CPU-second
for each and the ratios. **Memory**: peak RSS of each tool on one generated 50k-line file
(``--memory-lines``). ``--compare-inference DIR`` times astroid's inference against gapcheck's symbol
table on the receivers of ``.step()/.scale()/.set_epoch()...`` calls of the corpus (needs astroid).

    .venv/bin/python scripts/bench_lint.py [--lines 100000] [--rounds 3] [--jobs N] [--corpus DIR] [--against SRC]
"""
from __future__ import annotations

import argparse
import os
import random
import resource
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent

MODULE = '''"""Training code for experiment {n}: data, model, loops."""
import argparse
import math
import os
import random

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, DistributedSampler, random_split
from torchvision import transforms

from {pkg}.common import AverageMeter, accuracy, save_checkpoint


class Dataset{n}(Dataset):
    def __init__(self, root, split="train", transform=None):
        self.root = root
        self.split = split
        self.transform = transform
        self.items = sorted(os.listdir(os.path.join(root, split)))

    def __len__(self):
        return len(self.items)

    def __getitem__(self, index):
        path = os.path.join(self.root, self.split, self.items[index])
        sample = np.load(path)
        label = int(self.items[index].split("_")[0])
        if self.transform is not None:
            sample = self.transform(sample)
        return sample, label


class Block{n}(nn.Module):
    def __init__(self, channels, dropout={dropout}):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(channels)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.drop(out)
        out = self.bn2(self.conv2(out))
        return F.relu(out + x)


class Net{n}(nn.Module):
    def __init__(self, num_classes={classes}, width={width}, depth={depth}):
        super().__init__()
        self.stem = nn.Conv2d(3, width, 3, padding=1)
        self.blocks = nn.Sequential(*[Block{n}(width) for _ in range(depth)])
        self.head = nn.Linear(width, num_classes)

    def forward(self, x):
        x = self.blocks(F.relu(self.stem(x)))
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.head(x)


def build_transforms(size):
    train_transform = transforms.Compose([
        transforms.RandomResizedCrop(size),
        transforms.RandomHorizontalFlip(),
        transforms.ToTensor(),
        transforms.Normalize((0.5, 0.5, 0.5), (0.25, 0.25, 0.25)),
    ])
    val_transform = transforms.Compose([
        transforms.Resize(int(size * 1.14)),
        transforms.CenterCrop(size),
        transforms.ToTensor(),
        transforms.Normalize((0.5, 0.5, 0.5), (0.25, 0.25, 0.25)),
    ])
    return train_transform, val_transform


def train_one_epoch(model, loader, optimizer, scaler, scheduler, device, epoch, clip={clip}):
    model.train()
    meter = AverageMeter()
    for step, (images, targets) in enumerate(loader):
        images, targets = images.to(device), targets.to(device)
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device_type="cuda", dtype=torch.float16):
            logits = model(images)
            loss = F.cross_entropy(logits, targets)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        scaler.step(optimizer)
        scale = scaler.get_scale()
        scaler.update()
        if scaler.get_scale() >= scale:
            scheduler.step()
        meter.update(loss.item(), images.size(0))
        if step % 100 == 0:
            print(f"epoch {{epoch}} step {{step}} loss {{meter.avg:.4f}}")
    return meter.avg


@torch.no_grad()
def evaluate(model, loader, device):
    model.eval()
    correct = total = 0
    for images, targets in loader:
        images, targets = images.to(device), targets.to(device)
        logits = model(images)
        correct += accuracy(logits, targets) * images.size(0)
        total += images.size(0)
    return correct / max(total, 1)


def cosine_lr(step, total, base_lr, warmup={warmup}):
    if step < warmup:
        return base_lr * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return 0.5 * base_lr * (1 + math.cos(math.pi * progress))


def parameter_groups(model, weight_decay):
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        if param.ndim <= 1 or name.endswith(".bias"):
            no_decay.append(param)
        else:
            decay.append(param)
    return [{{"params": decay, "weight_decay": weight_decay}}, {{"params": no_decay, "weight_decay": 0.0}}]


def run(args):
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    train_transform, val_transform = build_transforms(args.size)
    train_set = Dataset{n}(args.data, "train", train_transform)
    val_set = Dataset{n}(args.data, "val", val_transform)
    sampler = DistributedSampler(train_set) if args.distributed else None
    train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=sampler is None, sampler=sampler,
                              num_workers=args.workers, drop_last=True)
    val_loader = DataLoader(val_set, batch_size=args.batch_size, shuffle=False, num_workers=args.workers)
    model = Net{n}().to(device)
    optimizer = torch.optim.AdamW(parameter_groups(model, args.weight_decay), lr=args.lr)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=args.lr, total_steps=args.epochs * len(train_loader))
    scaler = torch.amp.GradScaler("cuda")
    best = 0.0
    for epoch in range(args.epochs):
        if sampler is not None:
            sampler.set_epoch(epoch)
        train_one_epoch(model, train_loader, optimizer, scaler, scheduler, device, epoch)
        score = evaluate(model, val_loader, device)
        if score > best:
            best = score
            save_checkpoint(model, os.path.join(args.out, "best.pt"))
    return best
{extra}

def parse_args(argv=None):
    parser = argparse.ArgumentParser(description="experiment {n}")
    parser.add_argument("--data", default="data")
    parser.add_argument("--out", default="runs/{n}")
    parser.add_argument("--size", type=int, default={size})
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=90)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--weight-decay", type=float, default=0.05)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--distributed", action="store_true")
    return parser.parse_args(argv)


if __name__ == "__main__":
    run(parse_args())
'''

#: Planted bugs, one per some modules (so the linter has real work and findings to report).
BUGS = [
    '''
def quick_eval(model, val_loader):
    outputs = []
    for images, _ in val_loader:
        outputs.append(model(images))
    return outputs
''',
    '''
def restore(path, model):
    model.load_state_dict(torch.load(path))
''',
    '''
def leaky_features(features, labels):
    from sklearn.preprocessing import StandardScaler
    from sklearn.model_selection import train_test_split
    scaled = StandardScaler().fit_transform(features)
    return train_test_split(scaled, labels)
''',
    '''
def running_loss(model, loader, optimizer):
    total = 0.0
    for images, targets in loader:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(images), targets)
        loss.backward()
        optimizer.step()
        total += loss
    return total
''',
]

COMMON = '''"""Helpers shared by the experiments."""
import torch


class AverageMeter:
    def __init__(self):
        self.sum = 0.0
        self.count = 0

    @property
    def avg(self):
        return self.sum / max(self.count, 1)

    def update(self, value, n=1):
        self.sum += value * n
        self.count += n


def accuracy(logits, targets):
    return (logits.argmax(1) == targets).float().mean().item()


def save_checkpoint(model, path):
    torch.save(model.state_dict(), path)
'''


def generate(root: Path, lines: int, seed: int = 0) -> list[Path]:
    """Write packages of training modules under ``root`` until ``lines`` lines exist; return the files."""
    rng = random.Random(seed)
    files: list[Path] = []
    total = n = 0
    while total < lines:
        pkg = f"project{n // 50}"
        folder = root / pkg
        if not folder.exists():
            folder.mkdir(parents=True)
            (folder / "__init__.py").write_text("")
            (folder / "common.py").write_text(COMMON)
            files += [folder / "__init__.py", folder / "common.py"]
            total += COMMON.count("\n")
        extra = BUGS[n % len(BUGS)] if n % 5 == 0 else ""
        text = MODULE.format(n=n, pkg=pkg, dropout=rng.choice([0.0, 0.1, 0.2]), classes=rng.choice([10, 100, 1000]),
                             width=rng.choice([32, 64, 128]), depth=rng.randint(2, 8), clip=rng.choice([0.5, 1.0]),
                             warmup=rng.choice([100, 500]), size=rng.choice([32, 224]), extra=extra)
        path = folder / f"train_{n}.py"
        path.write_text(text)
        files.append(path)
        total += text.count("\n")
        n += 1
    return files


def real_scripts() -> list[Path]:
    """Training scripts inside installed packages (see the module docstring)."""
    site = Path(sysconfig.get_paths()["purelib"])
    found: set[Path] = set()
    for folder in ("ray/train/examples", "ray/train/v2/examples", "ray/tune/examples", "accelerate/test_utils/scripts"):
        found |= set((site / folder).rglob("*.py")) if (site / folder).is_dir() else set()
    for path in site.rglob("*.py"):
        parts = set(path.relative_to(site).parts)
        if parts & {"tests", "test", "testing", "_vendor"} or path.name.startswith("test_"):
            continue
        try:
            if ".backward(" in path.read_text(encoding="utf-8", errors="ignore"):
                found.add(path)
        except OSError:
            continue
    return sorted(found)


def count_lines(files: list[Path]) -> int:
    """Lines of code: a notebook counts its code cells' lines (as gapcheck reports them), not its JSON."""
    from gapcheck.errors import InputError
    from gapcheck.lint.notebook import join_cells

    total = 0
    for path in files:
        if path.suffix == ".ipynb":
            try:
                total += join_cells(path.read_text(encoding="utf-8", errors="replace"), str(path))[0].count("\n")
            except InputError:
                continue
        else:
            total += path.read_bytes().count(b"\n")
    return total


def best_of(command: list[str], rounds: int, cwd: Path, ok: tuple[int, ...] = (0, 1)) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the process and its workers), best of ``rounds``.

    CPU time is reported beside wall time because a shared machine's wall clock mostly measures the
    neighbours; CPU seconds are what the tool itself costs.
    """
    best_wall = best_cpu = float("inf")
    for _ in range(rounds):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        done = subprocess.run(command, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        elapsed = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode not in ok:
            raise SystemExit(f"{command[0]} failed ({done.returncode}): {done.stderr[-2000:]}")
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        best_wall, best_cpu = min(best_wall, elapsed), min(best_cpu, cpu)
    return best_wall, best_cpu


def bench(name: str, files: list[Path], cwd: Path, rounds: int, jobs: int, ok: tuple[int, ...] = (0, 1),
          against: Path | None = None) -> None:
    lines = count_lines(files)
    arguments = [str(p) for p in files]
    ruff = [str(BIN / "ruff"), "check", "--no-cache", "--isolated", "--exit-zero", "--quiet"]
    commands = {
        f"gapcheck lint (-j {jobs})": [str(BIN / "gapcheck"), "lint", "--exit-zero", "--jobs", str(jobs), *arguments],
        "gapcheck lint (-j 1)": [str(BIN / "gapcheck"), "lint", "--exit-zero", "--jobs", "1", *arguments],
        "ruff check": [*ruff, *arguments],
        "ruff check --select ALL": [*ruff, "--select", "ALL", *arguments],
    }
    if against is not None:  # an older gapcheck source tree, run by the same interpreter on the same files
        commands["gapcheck before (-j 1)"] = ["env", f"PYTHONPATH={against}", str(BIN / "gapcheck"), "lint",
                                              "--exit-zero", "--jobs", "1", *arguments]
    # rounds interleaved (every tool once, then again): load on a shared machine hits all tools alike
    timings = {tool: (float("inf"), float("inf")) for tool in commands}
    for _ in range(rounds):
        for tool, command in commands.items():
            wall, cpu = best_of(command, 1, cwd, ok)
            timings[tool] = (min(timings[tool][0], wall), min(timings[tool][1], cpu))
    print(f"\n{name}: {len(files)} files, {lines:,} lines (best of {rounds}, {os.cpu_count()} CPUs)")
    print(f"  {'tool':<22}{'wall s':>9}{'lines/s (wall)':>16}{'CPU s':>9}{'lines/s (CPU)':>15}{'ruff is x faster (CPU)':>24}")
    ruff_cpu = timings["ruff check"][1]
    for tool, (wall, cpu) in timings.items():
        print(f"  {tool:<22}{wall:>9.2f}{lines / wall:>16,.0f}{cpu:>9.2f}{lines / max(cpu, 1e-9):>15,.0f}"
              f"{cpu / max(ruff_cpu, 1e-9):>23.1f}x")
    if against is not None:
        now, before = timings["gapcheck lint (-j 1)"][1], timings["gapcheck before (-j 1)"][1]
        print(f"  (-j 1, lines per CPU-second: now / before = {before / max(now, 1e-9):.2f})")
    sys.stdout.flush()


def peak_rss(command: list[str], cwd: Path) -> float:
    """Peak resident memory (MiB) of ``command``, measured in a fresh process so earlier runs do not count."""
    probe = ("import resource, subprocess, sys; subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, "
             "stderr=subprocess.DEVNULL); print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    done = subprocess.run([sys.executable, "-c", probe, *command], cwd=cwd, capture_output=True, text=True, check=True)
    return int(done.stdout.strip()) / 1024  # Linux reports KiB


def memory(root: Path, lines: int) -> None:
    """Peak RSS of each tool on one file of ``lines`` lines (generated modules concatenated)."""
    parts = generate(root / "one", lines)
    big = root / "big_train.py"
    big.write_text("\n".join(p.read_text() for p in parts if p.name.startswith("train_")))
    count = big.read_text().count("\n")
    commands = {
        "gapcheck lint": [str(BIN / "gapcheck"), "lint", "--exit-zero", "--jobs", "1", str(big)],
        "ruff check": [str(BIN / "ruff"), "check", "--no-cache", "--isolated", "--exit-zero", "--quiet", str(big)],
    }
    print(f"\nmemory: one file of {count:,} lines ({big.stat().st_size / 1e6:.1f} MB)")
    baseline = peak_rss([sys.executable, "-c", "pass"], root)
    for tool, command in commands.items():
        print(f"  {tool:<22} peak RSS {peak_rss(command, root):8.1f} MiB   (a bare python: {baseline:.1f} MiB)")
    sys.stdout.flush()


def compare_inference(corpus: Path, limit: int = 120) -> None:
    """astroid's inference vs gapcheck's symbol table: time, and how many step/scale/set_epoch receivers each
    ties to a constructor (the question the loop rules ask)."""
    import ast

    import astroid
    from astroid import nodes

    from gapcheck.lint.source import read_source
    from gapcheck.lint.symbols import ModuleIndex, dotted

    methods = {"step", "scale", "set_epoch", "unscale_", "update", "zero_grad"}
    repos = ("pytorch+examples", "facebookresearch+mae", "facebookresearch+deit", "facebookresearch+dino",
             "ultralytics+yolov5", "karpathy+minGPT")
    files = sorted(p for repo in repos for p in (corpus / repo).rglob("*.py"))[:limit]
    lines = count_lines(files)
    started, ours = time.process_time(), {}
    for path in files:
        module = ModuleIndex.build(read_source(path, str(path)))
        for node in ast.walk(module.tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in methods:
                receiver = node.func.value
                ours[(str(path), receiver.lineno, receiver.col_offset)] = bool(module.constructors(dotted(receiver)))
    ours_s = time.process_time() - started
    started, theirs = time.process_time(), {}
    for path in files:
        tree = astroid.MANAGER.ast_from_file(str(path))
        for call in tree.nodes_of_class(nodes.Call):
            if isinstance(call.func, nodes.Attribute) and call.func.attrname in methods:
                try:
                    known = any(v is not astroid.Uninferable for v in call.func.expr.infer())
                except Exception:  # astroid raises many kinds of inference errors
                    known = False
                theirs[(str(path), call.func.expr.lineno, call.func.expr.col_offset)] = known
    theirs_s = time.process_time() - started
    keys = set(ours) & set(theirs)
    print(f"\ninference on {len(files)} files ({lines:,} lines), {len(keys)} step/scale/set_epoch receivers:")
    print(f"  gapcheck symbols   {ours_s:8.2f} CPU s  {lines / ours_s:>9,.0f} lines/s  tied to a constructor: "
          f"{sum(ours[k] for k in keys)}")
    print(f"  astroid infer()    {theirs_s:8.2f} CPU s  {lines / theirs_s:>9,.0f} lines/s  inferred: "
          f"{sum(theirs[k] for k in keys)}   (astroid is {theirs_s / max(ours_s, 1e-9):.0f}x slower)")
    sys.stdout.flush()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=100_000, help="lines of the generated corpus (0: skip it)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--skip-real", action="store_true", help="only the generated corpus")
    parser.add_argument("--corpus", type=Path, help="also the fetched upstream corpus (tests/lint/corpus)")
    parser.add_argument("--memory-lines", type=int, default=50_000, help="lines of the one-file memory test (0: skip)")
    parser.add_argument("--compare-inference", type=Path, metavar="CORPUS", help="astroid vs the symbol table")
    parser.add_argument("--against", type=Path, metavar="SRC", help="also time the gapcheck package under SRC "
                        "(e.g. `git archive REV gapcheck | tar -x -C SRC`), on the same files in the same run")
    args = parser.parse_args()
    if shutil.which(str(BIN / "ruff")) is None:
        raise SystemExit("ruff is not installed in this environment (pip install ruff)")
    with tempfile.TemporaryDirectory(prefix="bench-lint-") as tmp:
        root = Path(tmp)
        if args.lines:
            files = generate(root / "generated", args.lines)
            bench("generated training codebase", files, root, args.rounds, args.jobs, against=args.against)
        if not args.skip_real:
            bench("real training scripts in site-packages", real_scripts(), root, args.rounds, args.jobs,
                  against=args.against)
        if args.corpus:
            corpus = sorted(p for p in args.corpus.resolve().rglob("*") if p.suffix in (".py", ".ipynb") and p.is_file())
            # exit 2 is expected there: upstream has empty notebooks and a cell that does not parse
            bench(f"upstream corpus ({args.corpus})", corpus, root, args.rounds, args.jobs, ok=(0, 1, 2),
                  against=args.against)
        if args.memory_lines:
            memory(root, args.memory_lines)
    if args.compare_inference:
        compare_inference(args.compare_inference.resolve())


if __name__ == "__main__":
    main()
