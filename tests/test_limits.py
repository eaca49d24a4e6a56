"""gapcheck.limits: one zip-bomb ratio and one file check for every reader (checkpoints and inputs files alike)."""
from __future__ import annotations

import zipfile

import pytest
import torch

from gapcheck.errors import CheckpointError, InputError
from gapcheck.inputs import load_samples_file
from gapcheck.limits import MAX_COMPRESSION_RATIO, check_input_file
from gapcheck.model.loading import load_model


def _zip(path):
    """A zip archive with one deflated entry of zeros; returns how many times the entry expands (deflate: ~1030x)."""
    size = 4 << 20
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("archive/data.pkl" if path.suffix == ".pt" else "x.npy", b"\0" * size)
    with zipfile.ZipFile(path) as archive:
        info = archive.infolist()[0]
    return info.file_size / info.compress_size


def test_a_bomb_entry_is_refused_by_checkpoint_and_inputs_readers_alike(tmp_path):
    for path, read, error in ((tmp_path / "bomb.pt", lambda p: load_model(p, torch.nn.Linear(1, 1)), CheckpointError),
                              (tmp_path / "bomb.npz", load_samples_file, InputError)):
        ratio = _zip(path)
        assert ratio > MAX_COMPRESSION_RATIO  # deflate's ceiling on zeros is just above the one ratio
        with pytest.raises(error, match=r"entry '.*' declares 4194304 bytes from \d+ compressed \(a zip bomb\?\)"):
            read(path)


def test_missing_folder_and_empty_files_are_refused_before_any_reader_opens_them(tmp_path):
    with pytest.raises(CheckpointError, match="checkpoint not found"):
        check_input_file(tmp_path / "nope.pt", "checkpoint", CheckpointError)
    with pytest.raises(InputError, match="inputs file is not a file"):
        check_input_file(tmp_path, "inputs file")
    (tmp_path / "empty.npz").write_bytes(b"")
    with pytest.raises(InputError, match=r"inputs file is empty \(0 bytes\)"):
        load_samples_file(tmp_path / "empty.npz")
