from __future__ import annotations

import os
from pathlib import Path

import pytest

from gapcheck.data.api import leakage
from gapcheck.data.leakage import LeakageOptions
from gapcheck.engines import open_engine
from gapcheck.errors import InputError
from tests.data.conftest import validate


@pytest.fixture(scope="module")
def serial():
    with open_engine("serial") as engine:
        yield engine


def test_clean_splits_have_zero_findings(photo_splits, serial):
    result = leakage([f"train={photo_splits['train']}", f"val={photo_splits['clean_val']}"], engine=serial)
    document = validate(result)
    assert result.findings == () and document["verdict"] == "pass"
    assert [s["used"] for s in document["splits"]] == [10, 8]


def test_planted_copies_reencodes_resizes_and_crops_are_found(photo_splits, serial):
    result = leakage([f"train={photo_splits['train']}", f"val={photo_splits['leaky_val']}"], engine=serial)
    document = validate(result)
    exact = {(p.item, p.other, p.kind) for p in result.exact}
    assert exact == {("val:astronaut_copy.png", "train:astronaut.png", "file_bytes"),
                     ("val:camera_resaved.png", "train:camera.png", "pixels")}
    near = {p.item: (p.other, p.distance) for p in result.near}
    assert set(near) == {"val:coffee_reencoded.jpg", "val:chelsea_90.png", "val:rocket_110.png",
                         "val:hubble_cropped.png"}
    assert near["val:chelsea_90.png"][0] == "train:chelsea.png"
    assert all(d <= result.near_max_bits for _, d in near.values())
    codes = sorted(f.code for f in result.findings)
    assert codes == ["exact_duplicate"] * 2 + ["near_duplicate"] * 4
    assert document["verdict"] == "gap" and document["pair_counts"] == {"exact": 2, "near": 4}
    assert len(result.thumbnails) == 8  # both sides of every near pair, for the HTML


def test_threshold_is_configurable(photo_splits, serial):
    strict = leakage([f"train={photo_splits['train']}", f"val={photo_splits['leaky_val']}"], LeakageOptions(near=1.0),
                     engine=serial)
    assert all(p.distance == 0 for p in strict.near)


def test_labels_file_conflicts_missing_labels_and_groups(photo_splits, serial, tmp_path):
    labels = tmp_path / "labels.csv"
    labels.write_text("path,label,group\n"
                      "train/astronaut.png,person,p1\nval/astronaut_copy.png,rocket,p9\n"
                      "train/coffee.png,drink,p2\nval/coffee_reencoded.jpg,drink,p2\n"
                      "train/camera.png,person,p3\n")
    result = leakage([f"train={photo_splits['train']}", f"val={photo_splits['leaky_val']}"], engine=serial,
                     labels_file=str(labels))
    validate(result)
    conflicts = [f for f in result.findings if f.code == "label_conflict"]
    # the images' files as the subject (SARIF's artifact); the split-prefixed item names in the evidence
    assert [(f.subject.path, f.subject.other) for f in conflicts] == [
        (str(photo_splits["leaky_val"] / "astronaut_copy.png"), str(photo_splits["train"] / "astronaut.png"))]
    assert conflicts[0].evidence["items"] == ["val:astronaut_copy.png", "train:astronaut.png"]
    missing = {f.subject.stage: f.evidence["count"] for f in result.findings if f.code == "label_missing"}
    assert missing == {"train": 7, "val": 12}
    overlap = [f for f in result.findings if f.code == "group_overlap"]
    assert len(overlap) == 1 and overlap[0].evidence["groups"] == ["p2"]


def test_corrupt_images_symlink_loops_and_empty_splits_are_reported(photo_splits, serial, tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "truncated.png").write_bytes((photo_splits["train"] / "camera.png").read_bytes()[:200])
    (broken / "text.jpg").write_bytes(b"not an image")
    (broken / "coins.png").write_bytes((photo_splits["train"] / "camera.png").read_bytes())  # the one readable image
    os.symlink(broken, broken / "loop")
    (broken / "notes.txt").write_text("not a sample")
    result = leakage([f"train={photo_splits['train']}", f"broken={broken}"], engine=serial)
    document = validate(result)
    bad = [f for f in result.findings if f.code == "bad_input"]
    assert len(bad) == 1 and bad[0].evidence["count"] == 3  # two unreadable images + the symlink loop
    assert result.splits[1].used == 1 and "empty_split" not in {f.code for f in result.findings}
    reasons = " ".join(i["reason"] for i in document["bad_items"])
    assert "symlink loop" in reasons and "unreadable image" in reasons
    assert document["splits"][1]["skipped_files"] == 1  # notes.txt: counted, not silently dropped
    (broken / "coins.png").unlink()  # now none of its images reads: bad input, exit 2
    with pytest.raises(InputError, match="split broken .* cannot be read: .*symlink loop.*and 2 more"):
        leakage([f"train={photo_splits['train']}", f"broken={broken}"], engine=serial)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(InputError, match="split empty .* holds no image or table files"):
        leakage([f"train={photo_splits['train']}", f"empty={empty}"], engine=serial)


def test_a_split_that_is_a_symlink_loop_is_refused(photo_splits, serial, tmp_path):
    loop = tmp_path / "loop"
    os.symlink(loop, loop)
    with pytest.raises(InputError, match="split val .* cannot be read: .*symlink loop"):
        leakage([f"train={photo_splits['train']}", f"val={loop}"], engine=serial)


def test_memory_and_file_urls(photo_splits, serial):
    import fsspec

    memory = fsspec.filesystem("memory")
    for path in sorted(photo_splits["leaky_val"].iterdir())[:4]:
        memory.pipe(f"/val/{path.name}", path.read_bytes())
    memory.pipe("/val/astronaut_copy.png", (photo_splits["train"] / "astronaut.png").read_bytes())
    result = leakage([f"train=file://{photo_splits['train']}", "val=memory://val"], engine=serial)
    assert ("val:astronaut_copy.png", "train:astronaut.png") in {(p.item, p.other) for p in result.exact}
    glob = leakage([f"train={photo_splits['train']}/a*.png", "val=memory://val/*.png"], engine=serial)
    assert [p.item for p in glob.exact] == ["val:astronaut_copy.png"]


def test_torch_dataset_callable(photo_splits, serial, monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    result = leakage([f"train={photo_splits['train']}", "val=dataset_fixture:val_dataset"], engine=serial)
    # The dataset yields the astronaut photo as a float tensor in [0, 1]: the same pixels (after uint8 rounding).
    assert [(p.item, p.other) for p in result.exact] == [("val:0", "train:astronaut.png")]
    assert result.splits[1].used == 2


def test_three_splits_each_later_split_is_checked_against_each_earlier_one(photo_splits, serial, tmp_path):
    import shutil

    test = tmp_path / "test"
    test.mkdir()
    shutil.copy(photo_splits["clean_val"] / "coins.png", test / "coins_again.png")  # val → test leak
    shutil.copy(photo_splits["train"] / "moon.png", test / "moon.png")  # train → test leak
    result = leakage([f"train={photo_splits['train']}", f"val={photo_splits['clean_val']}", f"test={test}"],
                     engine=serial)
    assert sorted((p.item, p.other) for p in result.exact) == [("test:coins_again.png", "val:coins.png"),
                                                               ("test:moon.png", "train:moon.png")]


def test_every_report_format_renders(photo_splits, serial):
    from gapcheck.report.formats import FORMATS, render

    result = leakage([f"train={photo_splits['train']}", f"val={photo_splits['leaky_val']}"], engine=serial)
    for fmt in FORMATS:
        text = render(fmt, result)
        assert "astronaut_copy.png" in text, fmt


def test_workers_with_another_decoder_are_reported(photo_splits, serial, monkeypatch):
    from gapcheck.data import leakage as job

    calls = {"n": 0}

    def decode_path_per_call():  # what a worker with other library versions would report
        calls["n"] += 1
        return "PIL 13.0.0 …" if calls["n"] == 1 else "PIL 9.5.0 …"

    monkeypatch.setattr(job, "decode_path", decode_path_per_call)
    result = leakage([f"train={photo_splits['train']}", f"val={photo_splits['clean_val']}"], engine=serial)
    [finding] = [f for f in result.findings if f.code == "mixed_decoders"]
    assert finding.evidence["decode_paths"] == ["PIL 13.0.0 …", "PIL 9.5.0 …"]


def test_tiny_real_images_are_not_near_duplicates_of_each_other(serial, tmp_path):
    """sklearn's 8x8 digits: distinct handwritten digits hash within a few pHash bits (a false alarm before);
    they are compared for exact duplicates only, said once per split, and a planted exact copy is still found."""
    import numpy as np
    from PIL import Image
    from sklearn.datasets import load_digits

    digits = load_digits()
    rng = np.random.default_rng(0)
    order = rng.permutation(len(digits.images))[:300]
    for position, index in enumerate(order):
        split = "train" if position < 240 else "val"
        folder = tmp_path / split / str(digits.target[index])
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray((digits.images[index] * 255 / 16).astype(np.uint8)).save(folder / f"{index}.png")
    copy = next((tmp_path / "train").rglob("*.png"))
    (tmp_path / "val" / "copy.png").write_bytes(copy.read_bytes())
    result = leakage([f"train={tmp_path / 'train'}", f"val={tmp_path / 'val'}"], engine=serial)
    validate(result)
    codes = [f.code for f in result.findings]
    assert "near_duplicate" not in codes, [f.message for f in result.findings][:5]
    assert codes.count("exact_duplicate") == 1
    unchecked = [f for f in result.findings if f.code == "near_duplicate_unchecked"]
    assert {f.subject.stage for f in unchecked} == {"train", "val"} and unchecked[0].severity.value == "info"
