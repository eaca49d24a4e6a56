"""GC6xx: reproducibility — seeds at the entry point, worker seeding, benchmark vs determinism."""
from __future__ import annotations

import ast
from collections.abc import Iterator

from gapcheck.codes import lint as codes
from gapcheck.findings import Finding
from gapcheck.lint.facts import method
from gapcheck.lint.rules import Context, Rule
from gapcheck.lint.rules.loading import loaders
from gapcheck.lint.symbols import ModuleIndex, branches, dotted, flow, keyword, literal, on_two_branches
from gapcheck.lint.versions import WORKER_SEEDING, format_version


def main_guard(module: ModuleIndex) -> ast.If | None:
    for node in module.tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Compare):
            names = [dotted(node.test.left), *(dotted(c) for c in node.test.comparators)]
            constants = [c.value for c in node.test.comparators if isinstance(c, ast.Constant)]
            if "__name__" in names and "__main__" in constants + [getattr(node.test.left, "value", None)]:
                return node
    return None


def entry_points(ctx: Context) -> list[tuple[ast.AST, list[ast.AST]]]:
    """(where to report, statements that run) for the module's entry points."""
    module = ctx.module
    guard = main_guard(module)
    top = [s for s in module.tree.body if s is not guard and not isinstance(
        s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]  # what runs at import, seeds included
    found: list[tuple[ast.AST, list[ast.AST]]] = []
    if guard is not None:
        found.append((guard, top + list(guard.body)))
    for name in sorted(ctx.entry_functions - {"*"}):
        function = module.functions.get(name)
        if function is not None:
            found.append((function, top + list(function.body)))
    if "*" in ctx.entry_functions and guard is None:
        found.append((module.tree.body[0] if module.tree.body else module.tree, top))
    return found


#: Library set-up functions that seed every generator although their name does not say so
#: (detectron2's ``default_setup`` calls ``seed_all_rng``; MONAI's ``set_determinism`` seeds torch, numpy, random;
#: transformers' ``enable_full_determinism(seed)`` and Ray Train's ``enable_reproducibility(seed)`` call their
#: ``set_seed``; ignite's ``manual_seed`` seeds random, numpy and torch, unlike torch's own).
SEEDING_SETUPS = {"default_setup": "detectron2", "set_determinism": "monai", "init_random_seed": "mmdet",
                  "enable_full_determinism": "transformers", "enable_reproducibility": "ray.train",
                  "manual_seed": "ignite"}


class EntryPointWithoutSeed(Rule):
    code = codes.ENTRY_POINT_WITHOUT_SEED

    def check(self, ctx: Context) -> Iterator[Finding]:
        for anchor, body in entry_points(ctx):
            trains = generic_seed = backward = stepped = False
            seeded: set[str] = set()
            used: set[str] = set()
            for step in flow(ctx.program, ctx.module, body, only=(ast.Call,)):
                node = step.node
                if not isinstance(node, ast.Call):
                    continue
                name = step.module.callee(node)
                short = name.split(".")[-1]
                # Training = gradients *and* an update: a backward alone is profiling, a saliency map or a
                # gradient check (yolov5's models/yolo.py times forward-backward), where seeds change nothing.
                backward = backward or method(node) == "backward"
                stepped = stepped or method(node) == "step"
                if (backward and stepped) or (method(node) == "fit" and "trainer" in (dotted(node.func) or "").lower()):
                    trains = True
                if method(node) == "backward" or name.startswith("torch."):
                    used.add("torch")
                if short in SEEDING_SETUPS and name.startswith(SEEDING_SETUPS[short]):
                    generic_seed = True
                elif "seed" in short.lower() and short not in ("initial_seed", "default_rng"):
                    if name in ("numpy.random.seed",):
                        seeded.add("numpy")
                    elif name == "random.seed":
                        seeded.add("random")
                    elif short in ("manual_seed", "manual_seed_all"):
                        seeded.add("torch")
                    else:
                        generic_seed = True  # seed_everything / set_seed / the project's own helper
                if name.startswith("numpy.random.") and short not in ("seed", "default_rng", "RandomState", "Generator"):
                    used.add("numpy")
                if name.startswith("random.") and step.module.imports.get("random") == "random" and short != "seed":
                    used.add("random")
            missing = sorted(used - seeded) if not generic_seed else []
            if trains and missing:
                yield ctx.finding(self.code, anchor, f"training entry point never seeds {', '.join(missing)}: "
                                  "runs cannot be reproduced", unseeded=missing)


class WorkersWithoutSeeding(Rule):
    code = codes.WORKERS_WITHOUT_SEEDING
    needs = ("num_workers",)

    def check(self, ctx: Context) -> Iterator[Finding]:
        module = ctx.module
        owners: dict[str, int] = {}  # Dataset class / transform function -> line of its numpy global RNG call
        for call in module.calls:
            name = module.callee(call)
            if name.startswith("numpy.random.") and name.split(".")[-1] not in ("seed", "default_rng", "RandomState",
                                                                                "Generator"):
                owner = _worker_owner(module, call)
                if owner is not None:
                    owners.setdefault(owner, call.lineno)
        if not owners:
            return  # torch and random are re-seeded per worker; numpy's global state is the one that repeats
        if ctx.torch_floor is None or ctx.torch_floor >= WORKER_SEEDING:
            return  # torch >= 1.9 seeds numpy in every worker too (and nothing declared means today's torch)
        for call in loaders(module):
            workers = literal(keyword(call, "num_workers"))
            if keyword(call, "num_workers") is None or workers in (0, None):
                continue
            if keyword(call, "worker_init_fn") is not None or keyword(call, "generator") is not None or any(
                    k.arg is None for k in call.keywords):
                continue
            used = sorted(set(owners) & _referenced(module, call))
            if used:
                line = owners[used[0]]
                yield ctx.finding(self.code, call, f"DataLoader with worker processes and no worker_init_fn while "
                                  f"{used[0]} draws from numpy's global RNG (line {line}): on torch "
                                  f"{format_version(ctx.torch_floor)}, which this project allows, workers repeat the "
                                  "same random numbers", numpy_call_line=line, owner=used[0],
                                  torch_floor=format_version(ctx.torch_floor))


def _referenced(module: ModuleIndex, call: ast.Call, depth: int = 2) -> set[str]:
    """Names a call's arguments refer to, looking through variables bound to calls (``ds = Jitter(...)``)."""
    names: set[str] = set()
    for arg in [*call.args, *(k.value for k in call.keywords)]:
        for node in ast.walk(arg):
            if isinstance(node, (ast.Name, ast.Attribute)):
                text = dotted(node) or ""
                names.add(text.split(".")[-1])
                if depth > 0:
                    for value in module.bindings.get(text, ()):
                        if isinstance(value, ast.Call):
                            names.add(module.callee(value).split(".")[-1])
                            names |= _referenced(module, value, depth - 1)
    return names


_WORKER_WORDS = ("getitem", "transform", "augment", "collate", "__iter__", "load_sample")


def _worker_owner(module: ModuleIndex, node: ast.AST) -> str | None:
    """The Dataset class or transform/augment/collate function ``node`` runs in (code that runs in a worker)."""
    for parent in module.ancestors(node):
        if isinstance(parent, ast.ClassDef) and any((dotted(b) or "").endswith("Dataset") for b in parent.bases):
            return parent.name
        if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
                word in parent.name.lower() for word in _WORKER_WORDS) and module.owner.get(id(parent)) is None:
            return parent.name
    return None


def _assigned_true(module: ModuleIndex, suffix: str) -> list[ast.Assign]:
    return [node for node in ast.walk(module.tree) if isinstance(node, ast.Assign) and literal(node.value) is True
            and any((dotted(t) or "").endswith(suffix) for t in node.targets)]


def _claims_determinism(module: ModuleIndex) -> list[ast.Assign | ast.Call]:
    """``cudnn.deterministic = True`` and ``torch.use_deterministic_algorithms(True)``."""
    return [*_assigned_true(module, "cudnn.deterministic"),
            *(c for c in module.calls if module.callee(c).endswith("use_deterministic_algorithms")
              and c.args and literal(c.args[0]) is True)]


class BenchmarkWithDeterminism(Rule):
    code = codes.BENCHMARK_WITH_DETERMINISM
    needs = ("benchmark",)

    def check(self, ctx: Context) -> Iterator[Finding]:
        claims = _claims_determinism(ctx.module)
        for benchmark in _assigned_true(ctx.module, "cudnn.benchmark") if claims else ():
            side = branches(ctx.module, benchmark)  # `if deterministic: ... else: benchmark = True` is a choice
            claim = next((c for c in claims if not on_two_branches(side, branches(ctx.module, c))), None)
            if claim is not None:
                yield ctx.finding(self.code, benchmark, "cudnn.benchmark = True contradicts the determinism asked "
                                  f"for on line {claim.lineno}", determinism_line=claim.lineno)
                return


RULES = (EntryPointWithoutSeed, WorkersWithoutSeeding, BenchmarkWithDeterminism)
