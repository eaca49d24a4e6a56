from __future__ import annotations

from PIL import ImageEnhance

from gapcheck.data.api import drift
from gapcheck.data.drift import DriftOptions
from gapcheck.engines import open_engine
from gapcheck.report.formats import ReportFormat, render
from tests.data.conftest import validate
from tests.data.photos import PHOTOS, photo, save


def test_darker_copies_drift_in_brightness_not_in_size(tmp_path):
    for name in PHOTOS:
        image = photo(name)
        save(image, tmp_path / "reference" / f"{name}.png")
        save(ImageEnhance.Brightness(image).enhance(0.5), tmp_path / "current" / f"{name}.png")
    with open_engine("serial") as engine:
        result = drift(str(tmp_path / "reference"), str(tmp_path / "current"), DriftOptions(p_threshold=0.05),
                       engine=engine)
    validate(result)
    drifted = {f.feature for f in result.features if f.drift}
    assert {"brightness", "mean_r", "mean_g", "mean_b"} <= drifted
    assert not drifted & {"width", "height", "aspect_ratio"}
    html = render(ReportFormat.HTML, result)
    assert "Drift per feature" in html and "Coverage" in html


def test_engine_section_in_config_picks_the_engine(tmp_path, monkeypatch):
    from gapcheck.cli.app import main

    for name in PHOTOS[:4]:
        save(photo(name), tmp_path / "a" / f"{name}.png")
    config = tmp_path / "gapcheck.toml"
    config.write_text('[engine]\nname = "serial"\n\n[leakage]\nnear = 1.0\n')
    report = tmp_path / "r.json"
    code = main(["leakage", "--split", f"x={tmp_path / 'a'}", "--split", f"y={tmp_path / 'a'}", "--config", str(config),
                 "--json", str(report)])
    assert code == 1  # the same four photos in both splits
    assert '"near": 1.0' in report.read_text()
    config.write_text('[engine]\nname = "spark"\n')
    assert main(["leakage", "--split", f"x={tmp_path / 'a'}", "--split", f"y={tmp_path / 'a'}",
                 "--config", str(config)]) == 2
