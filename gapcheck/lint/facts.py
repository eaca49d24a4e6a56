"""What a call means in a training loop, and which frameworks run the loop for the user.

The classifiers answer one question each ("is this an optimizer step?") from the call's name and
what its receiver is bound to, so ``opt.step()`` counts when ``opt = torch.optim.AdamW(...)`` and
``scheduler.step()`` never does. :func:`managed` names the parts of the loop a framework in the
module takes over; rules about those parts stay silent there (precision over recall).
"""
from __future__ import annotations

import ast
import re
from enum import Enum

from gapcheck.lint.symbols import ModuleIndex, dotted, last_name, tokens

OPTIMIZERS = ("SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta", "Adamax", "NAdam", "RAdam", "LBFGS",
              "SparseAdam", "ASGD", "Rprop", "Adafactor", "ZeroRedundancyOptimizer", "Lion", "Muon")
SCHEDULER_SUFFIXES = ("LR", "Scheduler", "LRScheduler", "ReduceLROnPlateau", "OneCycleLR", "CosineAnnealingLR",
                      "get_scheduler", "get_linear_schedule_with_warmup", "get_cosine_schedule_with_warmup")


class Aspect(str, Enum):
    """A part of the training loop a framework can own."""

    SAMPLER_EPOCH = "sampler_epoch"  # DistributedSampler.set_epoch
    AMP = "amp"  # loss scaling, unscale before clipping
    EVAL_MODE = "eval_mode"  # model.eval()/train() and no_grad around validation
    STEP_LOOP = "step_loop"  # zero_grad / backward / step / scheduler order


_ALL = frozenset(Aspect)


def managed(module: ModuleIndex) -> frozenset[Aspect]:
    """The loop aspects a framework imported by ``module`` takes care of."""
    origins = set(module.imports.values())
    found: set[Aspect] = set()

    def imports(*prefixes: str) -> bool:
        return any(o == p or o.startswith(p + ".") for o in origins for p in prefixes)

    if imports("pytorch_lightning", "lightning.pytorch") or (
            imports("lightning") and not _mentions(module, "Fabric")):
        found |= _ALL  # the Trainer runs the loop, validation included
    if imports("lightning.fabric", "lightning_fabric") or (imports("lightning") and _mentions(module, "Fabric")):
        found |= {Aspect.SAMPLER_EPOCH, Aspect.AMP}
    if imports("accelerate"):
        found |= {Aspect.SAMPLER_EPOCH, Aspect.AMP}
    if any(o.split(".")[-1] in ("Trainer", "Seq2SeqTrainer", "SFTTrainer") for o in origins
           if o.startswith(("transformers", "trl"))):
        found |= _ALL
    if imports("torch.distributed.fsdp", "torch.distributed.optim", "deepspeed", "torch.distributed._composable"):
        found |= {Aspect.AMP}
    if imports("deepspeed", "torch.distributed.autograd", "torch.distributed.rpc"):
        found |= {Aspect.STEP_LOOP}  # DeepSpeed's engine and distributed autograd contexts handle gradients
    if imports("mxnet", "tensorflow", "keras", "jax", "flax", "paddle", "mindspore", "oneflow") and not imports("torch"):
        found |= _ALL  # another framework's loop (d2l's mxnet/tensorflow twins): eval()/step/zero_grad mean other things
    if imports("ray.train"):
        found |= {Aspect.SAMPLER_EPOCH}  # prepare_data_loader sets the sampler's epoch
    return frozenset(found)


def _mentions(module: ModuleIndex, name: str) -> bool:
    return name in module.source.text


def receiver(call: ast.Call) -> ast.expr | None:
    return call.func.value if isinstance(call.func, ast.Attribute) else None


def method(call: ast.Call) -> str | None:
    return call.func.attr if isinstance(call.func, ast.Attribute) else None


def _named(node: ast.AST | None, *words: str) -> bool:
    name = last_name(node)
    return bool(name) and bool(tokens(name) & set(words))


GRAD_SCALERS = ("GradScaler", "ShardedGradScaler")


def is_scaler(module: ModuleIndex, node: ast.AST | None) -> bool:
    """A GradScaler: built as one, or (built from nothing gapcheck can see) named ``scaler``/``grad_scaler``.

    The name must end in "scaler": ``scaler_meter = AverageMeter()`` is not one, nor a name bound to
    anything else (``scaler = StandardScaler()``).
    """
    constructors = module.constructors(dotted(node))
    if constructors:
        return any(c.split(".")[-1] in GRAD_SCALERS for c in constructors)
    name = last_name(node)
    words = tokens(name) if name else frozenset()
    return bool(name) and name.lower().rstrip("_").endswith("scaler") and "meter" not in words


#: Loss-scaler objects whose call is backward + (unscale + clip) + step + update (timm's ``NativeScaler`` /
#: ``ApexScaler``, DeiT/MAE/Swin/ConvNeXt copies named ``NativeScalerWithGradNormCount``).
LOSS_SCALER_CLASSES = ("NativeScaler", "ApexScaler", "NativeScalerWithGradNormCount")


def is_loss_scaler_call(module: ModuleIndex, call: ast.Call) -> bool:
    """``loss_scaler(loss, optimizer, ...)`` on an object gapcheck cannot read (an installed timm, a parameter):
    built by a known loss-scaler class, or, unbound, named ``loss_scaler``/``*_scaler`` and given a loss and an
    optimizer."""
    if not isinstance(call.func, (ast.Name, ast.Attribute)) or len(call.args) < 2:
        return False
    constructors = module.constructors(dotted(call.func))
    if constructors:
        return any(c.split(".")[-1] in LOSS_SCALER_CLASSES for c in constructors)
    name = last_name(call.func) or ""
    return name.lower().endswith("scaler") and "meter" not in tokens(name) and is_optimizer(module, call.args[1])


def is_scheduler(module: ModuleIndex, node: ast.AST | None) -> bool:
    if any(c.split(".")[-1].endswith(SCHEDULER_SUFFIXES) or ".lr_scheduler." in c
           for c in module.constructors(dotted(node))):
        return True
    return _named(node, "scheduler", "sched", "lrs") or last_name(node) in ("lr_scheduler", "scheduler")


def is_optimizer(module: ModuleIndex, node: ast.AST | None) -> bool:
    if is_scheduler(module, node) or is_scaler(module, node):
        return False
    if module.bound_to(node, *OPTIMIZERS):
        return True
    return _named(node, "optimizer", "optim", "opt", "optimiser")


def is_backward(call: ast.Call) -> bool:
    return method(call) == "backward"


def is_zero_grad(call: ast.Call) -> bool:
    return method(call) == "zero_grad"


def is_optimizer_step(module: ModuleIndex, call: ast.Call) -> bool:
    """``optimizer.step()`` or ``scaler.step(optimizer)``."""
    return method(call) == "step" and (is_optimizer(module, receiver(call)) or is_scaler(module, receiver(call)))


def is_scheduler_step(module: ModuleIndex, call: ast.Call) -> bool:
    return method(call) == "step" and is_scheduler(module, receiver(call))


def is_scaler_call(module: ModuleIndex, call: ast.Call, name: str) -> bool:
    return method(call) == name and is_scaler(module, receiver(call))


def is_clip(module: ModuleIndex, call: ast.Call) -> bool:
    """torch.nn.utils.clip_grad_norm_/clip_grad_value_ (not a framework's own clipping method)."""
    name = module.callee(call)
    if re.fullmatch(r"dispatch_clip_grad|clip_gradients?|clip_grads?(_norm)?", name.split(".")[-1]):
        return True  # timm's clip dispatcher, DINO's utils.clip_gradients, a project's own clip helper
    return name.split(".")[-1] in ("clip_grad_norm_", "clip_grad_value_") and (
        "nn.utils" in name or name in ("clip_grad_norm_", "clip_grad_value_")
        or module.imports.get(name.split(".")[0], "").startswith("torch"))


def is_mode_call(call: ast.Call, mode: str) -> bool:
    """``x.eval()`` / ``x.train()`` (``train(False)`` counts as eval, ``train(True)`` as train)."""
    name = method(call)
    if name == "eval" and not call.args and not call.keywords:
        return mode == "eval"
    if name == "train" and len(call.args) <= 1 and not call.keywords:
        if call.args and isinstance(call.args[0], ast.Constant) and call.args[0].value is False:
            return mode == "eval"
        # train(set_training_mode) (DeiT, MAE): a flag that is True in training runs, so it restores train mode
        return mode == "train"
    return False


MODEL_WORDS = frozenset({"model", "net", "network", "classifier", "encoder", "decoder", "module", "backbone",
                         "student", "teacher", "generator", "discriminator", "policy", "critic", "actor"})


def is_model_name(name: str | None) -> bool:
    return bool(name) and bool(tokens(name or "") & MODEL_WORDS)
