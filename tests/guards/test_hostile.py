"""Hostile or unlucky use of the guards: one clear GuardError/UsageError (or nothing, when nothing is wrong),
never a crash inside gapcheck and never a false alarm."""
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from gapcheck.errors import UsageError
from gapcheck.guards import EvalGuard, EvalModeError, GradientError, GradientHealth, ScalerStepMonitor, profile_steps


class _FailingBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        raise RuntimeError("planted failure in backward")


def test_a_backward_that_raised_does_not_switch_the_gradient_guard_off():
    first, second = nn.Linear(4, 4), nn.Linear(4, 4)
    model = nn.ModuleDict({"first": first, "second": second})
    with GradientHealth(model) as guard:
        x = torch.randn(2, 4)
        # second's nodes are newer, so the engine accumulates its gradient (hook fires, callback queued) before
        # it reaches the failing node; the queued callback then never runs
        loss = _FailingBackward.apply(first(x)).sum() + second(x).sum()
        with pytest.raises(RuntimeError, match="planted failure"):
            loss.backward()
        model.zero_grad(set_to_none=True)
        with pytest.raises(GradientError, match="NaN"):
            (first(x).sum() + second(x).sum() * float("nan")).backward()
    assert guard.last is not None and "second.weight" in guard.last.nonfinite


def test_sparse_and_complex_gradients_are_checked_not_crashed_on():
    emb = nn.Embedding(50, 4, sparse=True)
    with GradientHealth(emb) as guard:
        emb(torch.randint(0, 50, (3, 5))).sum().backward()
    assert guard.last.ok and guard.last.checked == 1
    cplx = nn.Linear(4, 4, dtype=torch.cfloat)
    with GradientHealth(cplx) as guard:
        cplx(torch.randn(2, 4, dtype=torch.cfloat)).abs().sum().backward()
    assert guard.last.ok and guard.last.checked == 2


def test_already_nan_running_stats_are_not_reported_as_pollution():
    # NaN != NaN: a bitwise comparison blamed a clean eval-mode validation for statistics broken long before
    model = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4))
    model[1].running_var.fill_(float("nan"))
    with EvalGuard(model) as guard:
        model(torch.randn(3, 4))
    assert guard.last.ok and guard.last.watched_buffers == 3
    model[1].running_var[0] = 1.0  # still NaN elsewhere; a real change is still seen
    model.train()
    with pytest.raises(EvalModeError, match="normalization statistics"), EvalGuard(model, set_eval=False):
        model(torch.randn(3, 4))


@pytest.mark.parametrize("kwargs, said", [({"scaler": object()}, "needs a torch.amp.GradScaler"),
                                          ({"window": 2.5}, "window must be an integer")])
def test_scaler_monitor_misuse_is_a_usage_error(kwargs, said):
    args = {"scaler": torch.amp.GradScaler("cpu"), **kwargs}
    with pytest.raises(UsageError, match=said):
        ScalerStepMonitor(args.pop("scaler"), **args)


def test_a_disabled_scaler_is_never_flagged():
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    monitor = ScalerStepMonitor(scaler, optimizer, window=5)
    for _ in range(12):
        optimizer.zero_grad()
        scaler.scale(model(torch.randn(2, 4)).sum()).backward()
        scaler.step(optimizer)
        scaler.update()
        report = monitor.observe()
    assert report.ok and report.scale is None and not monitor.findings and report.optimizer_steps == 12


class _CorruptAt(Dataset):
    def __len__(self):
        return 32

    def __getitem__(self, index):
        if index == 20:
            raise ValueError("corrupt sample 20")
        return torch.randn(4)


@pytest.mark.parametrize("workers", [0, 1])
def test_a_loader_that_raises_mid_epoch_is_one_usage_error_naming_the_step(workers):
    model = nn.Linear(4, 1)

    def step(batch):
        model(batch).sum().backward()

    loader = DataLoader(_CorruptAt(), batch_size=4, num_workers=workers)
    with pytest.raises(UsageError, match=r"loader failed while profiling, at step 6 \(measured\): ValueError: corrupt sample 20"):
        profile_steps(step, loader, steps=10, warmup=1)


def test_a_train_step_error_stays_the_users_with_a_note():
    def step(batch):
        raise KeyError("label")

    with pytest.raises(KeyError) as info:
        profile_steps(step, [torch.zeros(2)] * 4, steps=2, warmup=1)
    assert any("train_step at step 1 (warm-up)" in note for note in info.value.__notes__)


@pytest.mark.parametrize("loader, kwargs, said", [(5, {}, "loader must be iterable"),
                                                  ([1, 2], {"steps": 2.5}, "steps must be an integer")])
def test_profile_misuse_is_a_usage_error(loader, kwargs, said):
    with pytest.raises(UsageError, match=said):
        profile_steps(lambda batch: None, loader, **kwargs)


def test_dataloader_workers_stop_when_profiling_fails():
    import multiprocessing

    def step(batch):
        raise RuntimeError("planted failure in the step")

    loader = DataLoader(torch.randn(64, 4), batch_size=4, num_workers=2)
    before = set(multiprocessing.active_children())
    with pytest.raises(RuntimeError, match="planted") as info:
        profile_steps(step, loader, steps=3, warmup=1)
    # the exception's traceback keeps profile_steps' frame alive; its loader iterator must not keep the workers
    assert info.value.__traceback__ is not None
    assert set(multiprocessing.active_children()) - before == set()
