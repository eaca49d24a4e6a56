"""GC4xx: evaluation — eval()/no_grad around validation, train() restored, no random augmentation."""
from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from typing import ClassVar

from gapcheck.codes import lint as codes
from gapcheck.findings import Finding
from gapcheck.lint.facts import Aspect, is_model_name
from gapcheck.lint.loops import Event, Kind, events, loop_events
from gapcheck.lint.rules import Context, Rule
from gapcheck.lint.rules.ddp import is_epoch_loop
from gapcheck.lint.symbols import (
    ModuleIndex,
    Program,
    dotted,
    flow,
    is_eval_name,
    keyword,
    last_name,
    literal,
    ordered,
    tokens,
)

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)
_EVAL_FUNCTION_WORDS = {"val", "valid", "validate", "validation", "eval", "evaluate", "evaluation"}
_NO_GRAD = {"no_grad", "inference_mode"}


def _disables_grad(name: str) -> bool:
    """``no_grad`` / ``inference_mode``, or a project's own wrapper named after them (yolov5's
    ``smart_inference_mode()``, a ``maybe_no_grad``): a reader takes those at their word."""
    last = name.split(".")[-1]
    return last in _NO_GRAD or last.endswith(("_no_grad", "_inference_mode"))


def _is_eval_function(name: str) -> bool:
    words = tokens(name)
    if name.startswith("test_"):
        return False  # a pytest test, not a test-set loop
    return bool(words & _EVAL_FUNCTION_WORDS) or name in ("test", "run_test", "test_epoch", "test_model") \
        or name.endswith("_test")


def _iter_is_eval(loop: ast.For | ast.AsyncFor) -> bool:
    for node in ast.walk(loop.iter):
        name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else \
            node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None
        if name and is_eval_name(name):
            return True
    return False


#: Words of a call that builds, loads or inspects a model rather than running it (``build_model(cfg)``).
_NOT_FORWARD = frozenset({"build", "get", "load", "create", "make", "init", "save", "export", "summary", "compile",
                          "wrap", "prepare", "setup", "register", "freeze", "count", "print", "log", "copy", "convert",
                          "parameters", "state", "dict", "zero", "grad", "named", "apply", "eval", "train", "to"})
_FORWARD_METHODS = frozenset({"forward", "predict", "generate", "infer", "inference", "forward_features"})


def is_forward(module: ModuleIndex, call: ast.Call) -> bool:
    """``model(x)``, ``self.net(x)``, ``model.module(x)``, ``model.forward(x)``: the model object itself is called.

    Not ``build_model(cfg)`` (a function or class of the module, an import, or a verb in the name) and not
    ``utils.model_fn(x)`` (an attribute of an imported module).
    """
    func = call.func
    name = last_name(func)
    if not name:
        return False
    if isinstance(func, ast.Attribute) and name in _FORWARD_METHODS:
        return is_model_name(last_name(func.value))
    if _built_as_network(module, dotted(func)):
        return True  # m = Net(); m(x): what it holds decides, whatever it is called
    if not is_model_name(name) or tokens(name) & _NOT_FORWARD:
        return False
    if isinstance(func, ast.Name):
        return not (func.id in module.functions or func.id in module.imports or func.id in module.classes)
    root = dotted(func)
    head = root.split(".")[0] if root else None
    return head is None or head not in module.imports


#: Constructors of library networks: calling what they built is a forward pass.
_NETWORK_FACTORIES = ("torchvision.models.", "timm.create_model", "transformers.AutoModel")


def _built_as_network(module: ModuleIndex, name: str | None) -> bool:
    """``name`` holds a network: built from a class of this module with a ``forward``, or a library model."""
    for constructor in module.constructors(name) if name else ():
        if constructor in module.classes and f"{constructor}.forward" in module.functions:
            return True
        if constructor.startswith(_NETWORK_FACTORIES):
            return True
    return False


def _calls_model(program: Program, module: ModuleIndex, loop: ast.AST) -> bool:
    """The loop runs a model forward (here or in a function it calls)."""
    return any(isinstance(step.node, ast.Call) and is_forward(step.module, step.node)
               for step in flow(program, module, loop.body))  # type: ignore[attr-defined]


def eval_loops(ctx: Context) -> Iterator[tuple[ast.For | ast.AsyncFor, ast.FunctionDef | ast.AsyncFunctionDef | None]]:
    """Loops that evaluate a model on validation/test data without training it (the outermost one of a nest)."""
    yielded: set[int] = set()
    for loop in ctx.module.loops:
        if not isinstance(loop, (ast.For, ast.AsyncFor)):
            continue
        if any(id(a) in yielded for a in ctx.module.ancestors(loop)):
            continue  # an inner loop of one already reported
        function = ctx.module.enclosing_function(loop)
        if not (_iter_is_eval(loop) or (function is not None and _is_eval_function(function.name))):
            continue
        if function is not None and _model_method(ctx.module, function):
            continue  # a model's own aug_test/inference: its caller decides the mode
        kinds = {e.kind for e in loop_events(ctx.program, ctx.module, loop)}
        if Kind.BACKWARD in kinds or Kind.OPT_STEP in kinds or Kind.SCALER_STEP in kinds or is_epoch_loop(loop):
            continue
        if _calls_model(ctx.program, ctx.module, loop):
            yielded.add(id(loop))
            yield loop, function


def _model_method(module: ModuleIndex, function: ast.AST) -> bool:
    """A method of a network class (it defines ``forward``, or derives from a ``*Module``)."""
    owner = module.owner.get(id(function))
    cls = module.classes.get(owner) if owner else None
    if cls is None:
        return False
    return any(f"{owner}.{name}" in module.functions for name in _NETWORK_METHODS) or any(
        (dotted(b) or "").split(".")[-1].endswith(_NETWORK_BASES) for b in cls.bases)


#: A class with one of these methods or bases is a network (mmseg/mmdet-style models included).
_NETWORK_METHODS = ("forward", "forward_train", "forward_test", "extract_feat", "encode_decode")
_NETWORK_BASES = ("Module", "Model", "Depther", "Segmentor", "Detector", "Network", "Backbone")


def _callers(ctx: Context, function: ast.AST) -> list[ast.Call]:
    """Calls in this module that run ``function`` (resolved once per module)."""
    table = ctx.module.cache.get("callers")
    if table is None:
        table = ctx.module.cache["callers"] = {}
        for call in ctx.module.calls:
            resolved = ctx.program.resolve(ctx.module, call, within=ctx.module.enclosing_function(call))
            if resolved is not None:
                table.setdefault(id(resolved[1]), []).append(call)
    return table.get(id(function), [])  # type: ignore[no-any-return]


def _in_eval_mode(ctx: Context, node: ast.AST) -> bool:
    """Whether the model is in eval mode when ``node`` (a loop) runs: an ``.eval()`` before it in its function (or
    module body; directly or in a function called there) or inside the loop, and no ``.train()`` after that
    ``.eval()`` and before the loop. An ``.eval()`` on a branch that returns early does not reach the loop."""
    scope = ctx.module.enclosing_function(node) or ctx.module.tree
    body = [s for s in scope.body if s.lineno <= node.lineno]  # type: ignore[attr-defined]
    mode = False
    for event in events(ctx.program, ctx.module, body):
        if event.kind not in (Kind.EVAL, Kind.TRAIN):
            continue
        if event.step.via is node:
            continue  # inside the function whose call site this is: checked at its own loop
        inside = any(a is node for a in ctx.module.ancestors(event.node))
        anchor = event.step.via or event.node
        if not inside and getattr(anchor, "lineno", 0) > node.lineno:
            continue
        if not inside and _returns_before(ctx.module, anchor, node):
            continue
        if event.kind is Kind.EVAL:
            mode = True
        elif not inside:
            mode = False
    return mode


def _returns_before(module: ModuleIndex, anchor: ast.AST, node: ast.AST) -> bool:
    """``anchor`` sits on an ``if`` branch that ends in return/raise and does not hold ``node``."""
    child = anchor
    for parent in module.ancestors(anchor):
        if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return False
        if isinstance(parent, ast.If) and not any(a is parent for a in module.ancestors(node)):
            branch = parent.body if any(c is child for c in parent.body) else parent.orelse
            if branch and isinstance(branch[-1], (ast.Return, ast.Raise)):
                return True
        child = parent
    return False


def _in_no_grad(ctx: Context, node: ast.AST) -> bool:
    for parent in ctx.module.ancestors(node):
        if isinstance(parent, (ast.With, ast.AsyncWith)):
            for item in parent.items:
                expr = item.context_expr
                name = ctx.module.callee(expr) if isinstance(expr, ast.Call) else ctx.module.qualname(expr) or ""
                if _disables_grad(name) or (name.split(".")[-1] == "set_grad_enabled" and isinstance(
                        expr, ast.Call) and expr.args and literal(expr.args[0]) is False):
                    return True
        if isinstance(parent, _FUNCS):
            for decorator in parent.decorator_list:
                target = decorator.func if isinstance(decorator, ast.Call) else decorator
                if _disables_grad(dotted(target) or ""):
                    return True
    scope = ctx.module.enclosing_function(node) or ctx.module.tree
    for call in calls_in_all_of(scope):
        if ctx.module.callee(call).split(".")[-1] == "set_grad_enabled" and call.args and literal(call.args[0]) is False:
            return True
    return False


def _no_grad_inside(ctx: Context, loop: ast.AST) -> bool:
    """The loop body (or a function it calls) disables gradients around the forward itself."""
    for step in flow(ctx.program, ctx.module, loop.body):  # type: ignore[attr-defined]
        node = step.node
        if isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                expr = item.context_expr
                name = step.module.callee(expr) if isinstance(expr, ast.Call) else step.module.qualname(expr) or ""
                if _disables_grad(name):
                    return True
        if isinstance(node, ast.Call):
            resolved = ctx.program.resolve(step.module, node, within=step.module.enclosing_function(node))
            if resolved is not None and any(_disables_grad(dotted(d.func if isinstance(d, ast.Call) else d) or "")
                                            for d in resolved[1].decorator_list):
                return True
    return False


def calls_in_all_of(scope: ast.AST) -> Iterator[ast.Call]:
    for node in ordered(scope):
        if isinstance(node, ast.Call):
            yield node


def _covered(ctx: Context, loop: ast.AST, function: ast.AST | None, test) -> bool:  # type: ignore[no-untyped-def]
    """``test(node)`` holds at the loop, or at any call site of its function in this module (one level up)."""
    if test(loop):
        return True
    if function is None:
        return False
    return any(test(call) for call in _callers(ctx, function))


#: Layers that compute the same in train and eval mode (no dropout, no running statistics).
_MODE_FREE = frozenset({
    "Linear", "Bilinear", "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d",
    "ReLU", "ReLU6", "LeakyReLU", "PReLU", "ELU", "SELU", "GELU", "SiLU", "Mish", "Sigmoid", "Tanh", "Softmax",
    "LogSoftmax", "Softplus", "Hardtanh", "Hardswish", "MaxPool1d", "MaxPool2d", "MaxPool3d", "AvgPool1d",
    "AvgPool2d", "AvgPool3d", "AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "AdaptiveMaxPool2d", "Flatten", "Unflatten",
    "Embedding", "PixelShuffle", "PixelUnshuffle", "Identity", "Upsample", "LayerNorm", "GroupNorm", "ZeroPad2d",
    "ReflectionPad2d", "LSTM", "GRU", "RNN"})
_CONTAINERS = ("Sequential", "ModuleList")


def _mode_free_models(ctx: Context, loop: ast.AST) -> bool:
    """Every model the loop runs is built (here or in a project class's ``__init__``) only from layers that behave
    the same in both modes: ``model.eval()`` would change nothing, so its absence is not reported."""
    forwards = [n for n in ctx.module.walk(loop) if isinstance(n, ast.Call) and is_forward(ctx.module, n)]
    if not forwards:
        return False
    for call in forwards:
        constructors = ctx.module.constructors(dotted(call.func))
        if not constructors or not all(_built_mode_free(ctx, c) for c in constructors):
            return False
    return True


def _built_mode_free(ctx: Context, constructor: str) -> bool:
    if constructor.startswith(("torch.nn.", "nn.")):
        return constructor.split(".")[-1] in _MODE_FREE
    found = ctx.program.method_of(ctx.module, constructor, "__init__")
    if found is None:
        return False  # a library model (torchvision, timm): assume it has dropout or BatchNorm
    module, init = found
    layers = [n.value for n in ast.walk(init) if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call)
              and any((dotted(t) or "").startswith("self.") for t in n.targets)]
    return all(_layer_mode_free(module, layer) for layer in layers)


def _layer_mode_free(module: ModuleIndex, call: ast.Call) -> bool:
    short = module.callee(call).split(".")[-1]
    if short in _CONTAINERS:
        return all(isinstance(a, ast.Call) and _layer_mode_free(module, a) for a in call.args)
    if short in ("LSTM", "GRU", "RNN") and keyword(call, "dropout") is not None:
        return literal(keyword(call, "dropout")) in (0, 0.0)
    return short in _MODE_FREE


class _EvalLoopRule(Rule):
    """A validation/test loop that must run under some state (eval mode, no_grad): set around it — here or at a
    call site of its function — unless ``fine`` says the loop needs nothing."""

    aspect = Aspect.EVAL_MODE
    needs = ("for ",)
    message: ClassVar[str]
    fine: ClassVar[Callable[[Context, ast.AST], bool]]  # (ctx, loop): needs nothing
    holds_at: ClassVar[Callable[[Context, ast.AST], bool]]  # (ctx, loop or call site): the state is set there

    def check(self, ctx: Context) -> Iterator[Finding]:
        for loop, function in eval_loops(ctx):
            if not self.fine(ctx, loop) and not _covered(ctx, loop, function, lambda node: self.holds_at(ctx, node)):
                yield ctx.finding(self.code, loop, self.message)


class EvalWithoutEvalMode(_EvalLoopRule):
    code = codes.EVAL_WITHOUT_EVAL_MODE
    message = "validation/test loop runs the model without model.eval(): dropout and BatchNorm stay in training mode"
    fine = staticmethod(_mode_free_models)
    holds_at = staticmethod(_in_eval_mode)


class EvalWithoutNoGrad(_EvalLoopRule):
    code = codes.EVAL_WITHOUT_NO_GRAD
    message = "validation/test loop without torch.no_grad()/inference_mode(): every forward records an autograd graph"
    fine = staticmethod(_no_grad_inside)
    holds_at = staticmethod(_in_no_grad)


_FROZEN_WORDS = {"teacher", "ema", "target", "frozen", "ref", "reference", "momentum", "mean"}


class TrainModeNotRestored(Rule):
    """An epoch loop, or any loop that calls backward and steps an optimizer (``while True``,
    ``for it in range(max_iter)``), that switches to eval mode and trains again without ``.train()``.

    A function that calls ``.eval()`` itself before its own backward trains in eval mode on purpose
    (a linear probe on frozen features keeps BatchNorm statistics fixed): not reported. Each
    ``.eval()`` is reported once, at the outermost loop it breaks.
    """

    code = codes.TRAIN_MODE_NOT_RESTORED
    aspect = Aspect.EVAL_MODE
    needs = ("epoch", "backward", "scaler", "step(")  # the eval() may be in a function of another module

    def check(self, ctx: Context) -> Iterator[Finding]:
        reported: set[tuple[int, int]] = set()  # the eval() and the call in this module that led there
        for loop in ctx.module.loops:
            found = [e for e in loop_events(ctx.program, ctx.module, loop)
                     if not (e.kind is Kind.EVAL and (tokens(dotted(e.node.func.value) or "") & _FROZEN_WORDS  # type: ignore[attr-defined]
                                                      or _foreign_self(ctx.module, loop, e)))
                     and not (e.kind is Kind.BACKWARD and not _steps_with(e, loop_events(ctx.program, ctx.module, loop)))]
            kinds = [e.kind for e in found]
            if Kind.EVAL not in kinds or Kind.BACKWARD not in kinds:
                continue
            if not (is_epoch_loop(loop) or Kind.OPT_STEP in kinds or Kind.SCALER_STEP in kinds):
                continue
            last_eval = len(kinds) - 1 - kinds[::-1].index(Kind.EVAL)
            first_backward = kinds.index(Kind.BACKWARD)
            skips = [(e, _skipped_by_return(e, found[:i])) for i, e in enumerate(found[last_eval:], start=last_eval)
                     if e.kind is Kind.TRAIN]
            if Kind.TRAIN in kinds[:first_backward] or any(leave is None for _, leave in skips):
                continue
            if _trains_in_eval_mode(ctx.module, found, first_backward):
                continue
            where = found[last_eval]
            if (id(where.node), id(where.step.via)) in reported:
                continue
            reported.add((id(where.node), id(where.step.via)))
            line = where.node.lineno if where.step.module is ctx.module else where.step.via.lineno  # type: ignore[union-attr]
            if skips:  # a model.train() exists, but a return before it leads back to the loop
                train, leave = skips[0]
                place = "" if train.step.module is ctx.module else f" of {train.step.module.source.display}"
                yield ctx.finding(self.code, loop, f"the loop switches to eval mode (line {line}), and the return on "
                                  f"line {leave.lineno}{place} skips the model.train() on line {train.node.lineno}: "  # type: ignore[union-attr]
                                  "it trains again in eval mode", eval_line=line, return_line=leave.lineno)  # type: ignore[union-attr]
                continue
            yield ctx.finding(self.code, loop, f"the loop switches to eval mode (line {line}) and trains "
                              "again without model.train()", eval_line=line)


def _steps_with(backward: Event, found: list[Event]) -> bool:
    """A training backward: an optimizer/scaler step runs in the same function (not a profiler's timing pass)."""
    home = (backward.step.module, backward.step.module.enclosing_function(backward.node))
    return any(e.kind in (Kind.OPT_STEP, Kind.SCALER_STEP)
               and (e.step.module, e.step.module.enclosing_function(e.node)) == home for e in found)


def _foreign_self(module: ModuleIndex, loop: ast.AST, event: Event) -> bool:
    """``self.x.eval()`` in a method of another class reached through a call (an FID scorer's network, an
    evaluator's own copy): not the model this loop trains."""
    target = dotted(event.node.func.value) or ""  # type: ignore[attr-defined]
    if event.step.via is None or not target.startswith("self."):
        return False
    where = event.step.module
    function = where.enclosing_function(event.node)
    theirs = where.owner.get(id(function)) if function is not None else None
    home = module.enclosing_function(loop)
    ours = module.owner.get(id(home)) if home is not None else None
    return theirs is not None and (theirs != ours or where is not module)


def _skipped_by_return(train: Event, before: list[Event]) -> ast.Return | None:
    """``train`` is a ``.train()`` in a function the loop calls, and that function can return to the loop before it
    (after its own ``.eval()``, if any): on that path the loop goes on in eval mode. A return of the loop's own function
    ends training, so it does not count; nor does one whose ``try`` restores the mode in ``finally``."""
    if train.step.via is None:
        return None
    module = train.step.module
    home = module.enclosing_function(train.node)
    if home is None:
        return None
    evals = [e.node.lineno for e in before if e.kind is Kind.EVAL and e.step.module is module
             and module.enclosing_function(e.node) is home and e.node.lineno < train.node.lineno]  # type: ignore[attr-defined]
    start = max(evals, default=home.lineno)  # type: ignore[attr-defined]
    return next((node for node in sorted(_own_returns(home), key=lambda n: n.lineno)
                 if start < node.lineno < train.node.lineno  # type: ignore[attr-defined]
                 and not _restored_in_finally(module, node, train.node)), None)


def _own_returns(function: ast.AST) -> Iterator[ast.Return]:
    stack = list(ast.iter_child_nodes(function))
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Return):
            yield node
        elif not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            stack.extend(ast.iter_child_nodes(node))


def _restored_in_finally(module: ModuleIndex, leave: ast.AST, train: ast.AST) -> bool:
    for parent in module.ancestors(leave):
        if isinstance(parent, ast.Try) and any(train is n for s in parent.finalbody for n in ast.walk(s)):
            return True
    return False


def _trains_in_eval_mode(module: ModuleIndex, found: list[Event], first_backward: int) -> bool:
    """The function that runs the first backward calls ``.eval()`` itself before it: eval-mode training on purpose."""
    backward = found[first_backward]
    home = backward.step.module.enclosing_function(backward.node)
    return any(e.kind is Kind.EVAL and e.step.module is backward.step.module
               and e.step.module.enclosing_function(e.node) is home and home is not None
               for e in found[:first_backward])


# --- random augmentation ---------------------------------------------------------------------------
TORCHVISION_RANDOM = {"ColorJitter", "RandAugment", "AutoAugment", "TrivialAugmentWide", "AugMix", "ElasticTransform"}
ALBUMENTATIONS_RANDOM = {"HorizontalFlip", "VerticalFlip", "Flip", "Transpose", "Rotate", "SafeRotate",
                         "ShiftScaleRotate", "Affine", "Perspective", "HueSaturationValue", "RGBShift", "GaussNoise",
                         "GaussianBlur", "MotionBlur", "CoarseDropout", "ColorJitter", "CLAHE", "ChannelShuffle",
                         "ElasticTransform", "GridDistortion", "OpticalDistortion", "OneOf", "SomeOf", "ISONoise",
                         "Blur", "MedianBlur", "ToGray", "Sharpen", "Emboss", "Downscale", "ImageCompression"}


def random_transform(module: ModuleIndex, expr: ast.AST | None, depth: int = 2) -> str | None:
    """The name of a random augmentation inside ``expr`` (following names bound to transforms), else None."""
    if expr is None:
        return None
    for node in ast.walk(expr):
        if isinstance(node, ast.Call):
            name = module.callee(node)
            short = name.split(".")[-1]
            never = literal(keyword(node, "p")) in (0, 0.0)  # p=0: the transform never fires
            torchvision_random = (short.startswith("Random") and short != "RandomState") or short in TORCHVISION_RANDOM
            albumentations_random = name.startswith("albumentations") and short in ALBUMENTATIONS_RANDOM
            if (torchvision_random or albumentations_random) and not never:
                return short
        elif isinstance(node, ast.Name) and depth > 0:
            for value in module.bindings.get(node.id, ()):
                found = random_transform(module, value, depth - 1)
                if found:
                    return found
    return None


def _target_name(module: ModuleIndex, node: ast.AST) -> str | None:
    parent = module.parent(node)
    if isinstance(parent, (ast.Assign, ast.AnnAssign)):
        targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
        if len(targets) == 1 and (name := dotted(targets[0])):
            return name.split(".")[-1]
        if len(targets) == 1 and isinstance(targets[0], ast.Subscript) and isinstance(targets[0].slice, ast.Constant):
            return str(targets[0].slice.value)
    if isinstance(parent, ast.Dict):
        for key, value in zip(parent.keys, parent.values, strict=False):
            if value is node and isinstance(key, ast.Constant):
                return str(key.value)
    if isinstance(parent, ast.keyword) and parent.arg:
        return None
    return None


def _eval_dataset_call(call: ast.Call) -> bool:
    """``Dataset(..., train=False)`` / ``split="val"``: a constructor that builds held-out data."""
    if literal(keyword(call, "train")) is False or literal(keyword(call, "is_train")) is False:
        return True
    split = literal(keyword(call, "split"))
    return isinstance(split, str) and is_eval_name(split)


class RandomAugInEval(Rule):
    code = codes.RANDOM_AUG_IN_EVAL
    needs = ("Random", "ColorJitter", "Augment", "AugMix", "albumentations", "Elastic")

    def check(self, ctx: Context) -> Iterator[Finding]:
        module = ctx.module
        for call in module.calls:
            short = module.callee(call).split(".")[-1]
            if short in ("Compose", "Sequential", "SequentialAugmentation"):
                target = _target_name(module, call)
                if target and is_eval_name(target) and "tta" not in tokens(target) and (
                        found := random_transform(module, call)):  # test-time augmentation is random on purpose
                    yield ctx.finding(self.code, call, f"random augmentation {found} in the evaluation pipeline "
                                      f"'{target}'", transform=found)
                continue
            transform = keyword(call, "transform") or keyword(call, "transforms")
            if transform is not None and (_eval_dataset_call(call) or is_eval_name(_target_name(module, call))):
                if (found := random_transform(module, transform)) and not self._named_eval(transform):
                    yield ctx.finding(self.code, call, f"random augmentation {found} in a validation/test dataset's "
                                      "transform", transform=found)
            elif short == "random_split":
                yield from self._shared_split(ctx, call)

    @staticmethod
    def _rewrapped(module: ModuleIndex, subset: str) -> bool:
        """``val_set.dataset = ...`` / ``val_set.dataset.transform = ...`` or ``Wrapper(val_set, transform=...)``."""
        if any(key.startswith(subset + ".") for key in module.bindings):
            return True
        for call in module.calls:
            names = [a.id for a in call.args if isinstance(a, ast.Name)]
            if subset in names and (keyword(call, "transform") is not None
                                    or any(is_eval_name(n) and n != subset for n in names)):
                return True
        return False

    @staticmethod
    def _named_eval(transform: ast.AST) -> bool:
        return isinstance(transform, ast.Name) and is_eval_name(transform.id)  # reported at its own Compose

    def _shared_split(self, ctx: Context, call: ast.Call) -> Iterator[Finding]:
        module = ctx.module
        parent = module.parent(call)
        if not call.args or not isinstance(call.args[0], ast.Name) or not isinstance(parent, ast.Assign):
            return
        outputs = [dotted(e) for t in parent.targets if isinstance(t, ast.Tuple) for e in t.elts]
        held_out = [name for name in outputs if name and is_eval_name(name)]
        if not held_out:
            return
        for value in module.bindings.get(call.args[0].id, ()):
            if isinstance(value, ast.Call) and (found := random_transform(module, keyword(value, "transform"))):
                if self._rewrapped(module, held_out[0]):
                    return  # the author gives the held-out subset its own transform
                yield ctx.finding(self.code, call, f"random_split subset '{held_out[0]}' shares the training dataset's "
                                  f"transform with random augmentation {found}", transform=found)
                return


RULES = (EvalWithoutEvalMode, EvalWithoutNoGrad, TrainModeNotRestored, RandomAugInEval)
