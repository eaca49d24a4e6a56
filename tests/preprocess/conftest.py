"""Real photographs from the scikit-image package, copied (and converted) into a temporary folder."""
from __future__ import annotations

import shutil
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
import skimage
from PIL import Image

SKIMAGE_DATA = Path(skimage.__file__).parent / "data"
PHOTOS = ("astronaut.png", "coffee.png", "chelsea.png", "rocket.jpg")


def skimage_folder(tmp_path_factory, label: str, names: tuple[str, ...]) -> Path:
    """A new folder holding scikit-image's photos ``names``, copied as they ship."""
    folder = tmp_path_factory.mktemp(label)
    for name in names:
        shutil.copy(SKIMAGE_DATA / name, folder / name)
    return folder


def audit_pair(stages: Path, samples: Path, ref: str, cand: str):
    """preprocess-audit of ``samples`` through two functions of the module ``stages`` as train and infer."""
    from gapcheck.preprocess.audit import preprocess_audit

    prefix = f"{stages}:"
    return preprocess_audit(samples, {"train": prefix + ref, "infer": prefix + cand}, n=3, workers=1, repeats=0)


def gap_codes(result) -> set[str]:
    return {f.code for f in result.findings if f.is_gap}


@pytest.fixture(scope="session")
def photos(tmp_path_factory) -> Path:
    """Four real colour photographs (PNG and JPEG) of different sizes and aspect ratios."""
    return skimage_folder(tmp_path_factory, "photos", PHOTOS)


def _png_with_size(width: int, height: int) -> bytes:
    """A tiny PNG whose header claims width x height (a decompression bomb's header)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\x00" * 16)) + chunk(b"IEND", b"")


@pytest.fixture(scope="session")
def mixed_inputs(tmp_path_factory) -> Path:
    """Two good photos plus every kind of bad or unusual input."""
    folder = tmp_path_factory.mktemp("mixed")
    shutil.copy(SKIMAGE_DATA / "astronaut.png", folder / "a_astronaut.png")
    shutil.copy(SKIMAGE_DATA / "coffee.png", folder / "b_coffee.png")
    shutil.copy(SKIMAGE_DATA / "camera.png", folder / "c_grayscale.png")  # 8-bit grayscale photo
    rgba = Image.open(SKIMAGE_DATA / "chelsea.png").convert("RGBA")
    rgba.save(folder / "d_rgba.png")
    sixteen = (np.asarray(Image.open(SKIMAGE_DATA / "coffee.png").convert("RGB")).astype(np.uint16) * 257)
    import cv2

    cv2.imwrite(str(folder / "e_16bit.png"), sixteen[..., ::-1])
    data = (SKIMAGE_DATA / "rocket.jpg").read_bytes()
    (folder / "f_truncated.jpg").write_bytes(data[: len(data) // 3])
    (folder / "g_notes.txt").write_text("not an image at all\n")
    (folder / "h_bomb.png").write_bytes(_png_with_size(40000, 40000))
    (folder / "i_garbage.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00garbage" * 10)
    return folder


STAGES = "sample_models.preprocessing:"


def stage(name: str) -> str:
    return STAGES + name


@pytest.fixture(scope="session")
def exact_2x(tmp_path_factory) -> Path:
    """A 448x448 crop of a real photo: resizing it to 224x224 is an exact 2x downscale."""
    folder = tmp_path_factory.mktemp("exact2x")
    image = Image.open(SKIMAGE_DATA / "astronaut.png").convert("RGB")
    image.crop((32, 32, 480, 480)).save(folder / "a_exact2x.png")
    return folder


@pytest.fixture(scope="session")
def exact_2x_and_photos(tmp_path_factory, exact_2x) -> Path:
    """The exact-2x sample first, then two photos of other sizes (they separate the resize candidates)."""
    folder = tmp_path_factory.mktemp("exact2x_and_photos")
    shutil.copy(exact_2x / "a_exact2x.png", folder / "a_exact2x.png")
    for name in ("chelsea.png", "coffee.png"):
        shutil.copy(SKIMAGE_DATA / name, folder / name)
    return folder


def report_json(result) -> dict:
    """The result's JSON envelope as written by --json, validated against the shipped schema."""
    import json

    import jsonschema

    from gapcheck.report.formats import ReportFormat, render

    document = json.loads(render(ReportFormat.JSON, result))
    schema_path = Path(__file__).resolve().parents[2] / "gapcheck" / "schemas" / "preprocess-audit.schema.json"
    jsonschema.validate(document, json.loads(schema_path.read_text()))
    return document
