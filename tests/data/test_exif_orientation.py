"""A training photo saved sideways with an EXIF orientation tag is the same picture (issue 23 follow-up).

Phones store pixels as the sensor read them and an orientation tag; viewers and loaders that honour the tag show
the photo upright. A new user's review put such a copy of scikit-image's coffee in validation: its stored pixels'
pHash is 30+ bits from the original's and leakage passed. The perceptual hashes are now taken after
``PIL.ImageOps.exif_transpose``."""
from __future__ import annotations

import imagehash
from PIL import Image, ImageOps

from gapcheck.data.api import leakage
from gapcheck.data.hashing import perceptual_hashes, upright
from gapcheck.engines import open_engine
from tests.data.photos import photo, save

ORIENTATION = 0x0112


def _sideways_jpeg(image: Image.Image, path, orientation: int = 6):
    """``image`` stored turned 90° with the EXIF tag that turns it back (6: the viewer rotates 270°)."""
    exif = Image.Exif()
    exif[ORIENTATION] = orientation
    return save(image.transpose(Image.Transpose.ROTATE_90), path, fmt="JPEG", quality=95, exif=exif.tobytes())


def test_exif_rotated_copy_of_a_training_photo_is_found(tmp_path):
    for name in ("coffee", "astronaut", "rocket"):
        save(photo(name), tmp_path / "train" / f"{name}.png")
    save(photo("chelsea"), tmp_path / "val" / "chelsea.png")
    stored = _sideways_jpeg(photo("coffee"), tmp_path / "val" / "phone_copy.jpg")
    with Image.open(stored) as sideways:  # the file is what a phone writes: turned pixels and the tag
        assert sideways.getexif()[ORIENTATION] == 6 and sideways.size == photo("coffee").size[::-1]
        raw = imagehash.phash(sideways.convert("RGB")) - imagehash.phash(photo("coffee"))
        assert raw > 10  # the stored pixels alone are far from the original: the case the review missed
        assert ImageOps.exif_transpose(sideways).size == photo("coffee").size
    with open_engine("serial") as engine:
        result = leakage([f"train={tmp_path / 'train'}", f"val={tmp_path / 'val'}"], engine=engine)
    pairs = [(p.item, p.other, p.kind) for p in result.near]
    assert pairs == [("val:phone_copy.jpg", "train:coffee.png", "near")] and result.near[0].distance <= 2
    assert [f.code for f in result.findings] == ["near_duplicate"]


def test_upright_leaves_untagged_images_alone():
    image = photo("chelsea")
    rgb = image.convert("RGB")
    assert upright(image, rgb) is rgb  # no EXIF: no copy, same hashes as before
    assert perceptual_hashes(upright(image, rgb)) == perceptual_hashes(rgb)
