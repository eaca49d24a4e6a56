import contextlib

import pytest
import torch
from torch import nn

from gapcheck.errors import UsageError
from gapcheck.guards import InputContractError, input_contract
from tests.guards.conftest import make_batch


def test_clean_inputs_pass_and_the_hook_is_removable(cnn):
    x, _ = make_batch()
    with input_contract(cnn, dtype=torch.float32, range=(-10, 10), layout="NCHW") as contract:
        cnn(x)
        cnn(x)
    assert contract.calls == 2 and contract.violations == 0 and contract.channels == 3  # from the first conv
    cnn(x.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2) * 100)  # removed: no check any more


@pytest.mark.parametrize("bad, check, words", [
    (lambda x: x.double(), "dtype", "dtype torch.float64"),
    (lambda x: (x * 200).clamp(0, 255), "range", "is the normalization"),
    (lambda x: x.index_fill(0, torch.tensor([0]), float("nan")), "range", "NaN"),
    (lambda x: x[0], "layout", "3 axes"),
])
def test_planted_breaches_are_named(cnn, bad, check, words):
    x, _ = make_batch()
    contract = input_contract(cnn, dtype=torch.float32, range=(-10, 10), layout="NCHW")
    try:
        with pytest.raises(InputContractError, match=words) as caught:
            cnn(bad(x))
    finally:
        contract.remove()
    assert caught.value.finding.subject.step == check


def test_channels_last_input_is_recognised():
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.ReLU())
    contract = input_contract(model, layout="NCHW", mode="warn")
    model.to(memory_format=torch.channels_last)
    model(torch.randn(2, 32, 32, 3).permute(0, 3, 1, 2))  # channels_last memory, logical NCHW: fine
    assert contract.violations == 0
    with contextlib.suppress(RuntimeError):  # the conv itself fails after the hook counted the breach
        model(torch.randn(2, 32, 32, 3))
    assert contract.violations == 1 and "channels-last" in contract.breaches[0].message


def test_every_n_and_kwargs_argument():
    class Net(torch.nn.Module):
        def forward(self, *, pixels):
            return pixels.sum()

    net = Net()
    contract = input_contract(net, argument="pixels", dtype=torch.float32, every=2, mode="warn")
    for _ in range(4):
        net(pixels=torch.zeros(2, dtype=torch.int64))
    assert contract.calls == 4 and contract.violations == 2


def test_bad_declarations_are_usage_errors(cnn):
    with pytest.raises(UsageError):
        input_contract(cnn, range=(3, -3))
    with pytest.raises(UsageError):
        input_contract(cnn, layout="NC HW")


class _KeywordModel(nn.Module):
    """Called the Hugging Face way: model(input_ids=..., attention_mask=...)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(100, 4)

    def forward(self, input_ids, attention_mask=None):
        return self.embed(input_ids)


def test_keyword_called_models_are_checked_by_name_either_way():
    model = _KeywordModel()
    ids = torch.randint(0, 100, (2, 5))
    with input_contract(model, dtype=torch.int64, range=(0, 99), argument="input_ids") as contract:
        model(input_ids=ids)
        model(ids)  # positional call, contract declared by name: bound through forward's signature
        with pytest.raises(InputContractError, match=r"spans \[1\d\d\d, .*vocab_size"):
            model(input_ids=ids + 1000)
    assert contract.calls == 3


def test_a_positional_contract_on_a_keyword_call_says_which_keyword_to_declare():
    model = _KeywordModel()
    with input_contract(model, dtype=torch.int64), \
            pytest.raises(UsageError, match="argument='input_ids'"):
        model(input_ids=torch.zeros(1, 3, dtype=torch.long))
