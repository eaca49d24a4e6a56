import pytest
import torch

from gapcheck.guards import EvalGuard, EvalModeError
from tests.guards.conftest import make_batch


def validate(model, batches=2):
    return [model(make_batch(100 + i)[0]).argmax(1) for i in range(batches)]


def test_clean_validation_trips_nothing_and_restores_train_mode(cnn):
    cnn.train()
    with EvalGuard(cnn) as guard:
        assert not cnn.training and not cnn.bn.training and not torch.is_grad_enabled()
        validate(cnn)
    assert guard.last.ok and guard.last.watched_buffers == 3 and guard.findings == ()
    assert cnn.training and cnn.bn.training and torch.is_grad_enabled()


def test_validation_in_train_mode_pollutes_batchnorm(cnn):
    cnn.train()
    running_mean = cnn.bn.running_mean.clone()

    def buggy_validate(model):
        model.train()  # the planted bug: a helper switches back to train mode
        validate(model)

    with pytest.raises(EvalModeError, match="normalization statistics of 1 layer") as caught, EvalGuard(cnn) as guard:
        buggy_validate(cnn)
    assert caught.value.finding.code == "guards_bn_pollution" and caught.value.finding.subject.module == "bn"
    assert [f.code for f in guard.findings] == ["guards_bn_pollution", "guards_eval_train_mode"]
    assert set(guard.last.changed_buffers) == {"bn.running_mean", "bn.running_var", "bn.num_batches_tracked"}
    assert not torch.equal(cnn.bn.running_mean, running_mean)  # the damage is real, and named
    assert cnn.training  # modes restored even though it raised


def test_model_left_in_train_mode_without_bn_change(cnn):
    cnn.eval()
    with EvalGuard(cnn, mode="warn") as guard:
        cnn.drop.train()  # dropout switched on, no statistics touched
        validate(cnn)
    assert [f.code for f in guard.findings] == ["guards_eval_train_mode"] and guard.violations == 1
    assert guard.last.train_mode_modules == ("drop",) and not cnn.drop.training  # restored to eval


def test_per_module_modes_are_restored_exactly(cnn):
    cnn.train()
    cnn.bn.eval()  # frozen BatchNorm inside a training model
    with EvalGuard(cnn):
        validate(cnn)
    assert cnn.training and cnn.conv.training and not cnn.bn.training


def test_watch_only_mode_for_trainers_that_switch_modes_themselves(cnn):
    cnn.eval()
    with EvalGuard(cnn, set_eval=False) as guard:
        validate(cnn)
    assert guard.last.ok
    cnn.train()
    with pytest.raises(EvalModeError, match="statistics"), EvalGuard(cnn, set_eval=False):
        validate(cnn)


def test_the_blocks_own_exception_is_not_masked(cnn):
    with pytest.raises(ZeroDivisionError), EvalGuard(cnn):
        cnn.train()
        validate(cnn)
        raise ZeroDivisionError
    assert cnn.training
