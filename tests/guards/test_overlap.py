import numpy as np
import pytest
import torch
from torch.utils.data import Dataset, IterableDataset, Subset, TensorDataset

from gapcheck.guards import OverlapError, assert_no_overlap
from gapcheck.tensors import fingerprint


def dataset(n=30, seed=0):
    g = torch.Generator().manual_seed(seed)
    return TensorDataset(torch.randn(n, 3, 4, 4, generator=g), torch.arange(n))


def test_disjoint_splits_pass():
    full = dataset()
    report = assert_no_overlap(Subset(full, range(0, 20)), Subset(full, range(20, 30)))
    assert report.ok and report.first_items == 20 and report.second_items == 10


def test_shared_items_are_found_even_with_other_labels():
    full = dataset()
    val = [(full[i][0].clone(), -1) for i in (3, 25)]  # same images, relabelled
    with pytest.raises(OverlapError, match="1 of 2 val items are also in train") as caught:
        assert_no_overlap(Subset(full, range(0, 20)), val)
    assert caught.value.finding.code == "guards_split_overlap"
    assert caught.value.finding.evidence["pairs"] == [[3, 0]]


def test_fingerprint_is_the_canonical_one_so_dtype_matters():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    report = assert_no_overlap([x], [x.astype(np.float64)], mode="warn")  # same values, other dtype: not equal
    assert report.ok
    report = assert_no_overlap([torch.from_numpy(x)], [x.copy()], mode="warn")  # torch vs numpy: same bytes
    assert report.overlap_count == 1
    assert fingerprint(torch.from_numpy(x)) == fingerprint(x)


class Stream(IterableDataset):
    def __iter__(self):
        for i in range(5):
            yield {"image": torch.full((2, 2), float(i)), "label": i}


def test_iterable_and_dict_items_with_a_field_and_a_limit():
    report = assert_no_overlap(Stream(), Stream(), field="image", limit=3, mode="warn")
    assert report.overlap_count == 3 and report.first_items == 3


def test_a_key_function_picks_what_identifies_an_item():
    class Paths(Dataset):
        def __init__(self, names):
            self.names = names

        def __len__(self):
            return len(self.names)

        def __getitem__(self, i):
            return {"path": self.names[i], "pixels": torch.zeros(1)}

    report = assert_no_overlap(Paths(["a.png", "b.png"]), Paths(["c.png", "a.png"]), key=lambda item: item["path"],
                               mode="warn", names=("train", "test"))
    assert report.overlaps == ((0, 1),)
