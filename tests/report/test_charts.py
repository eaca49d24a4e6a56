"""Charts draw outside text (endpoint, layer, feature names): no raw control character may leave through matplotlib's
warnings, and no name may fail the report by reading as mathtext."""
from __future__ import annotations

import base64
import warnings

import pytest

from gapcheck.report.charts import draw, safe_warnings
from gapcheck.report.contract import Chart, Series

RAW = ("\x1b", "\x07")
HOSTILE = "prod\x1b[31m\x07\x1b]0;owned\x07"


def _is_png(encoded: str) -> bool:
    return base64.b64decode(encoded).startswith(b"\x89PNG\r\n\x1a\n")


def _charts(name: str) -> list[Chart]:
    return [
        Chart(title=f"{name} / logits", x=(f"{name} night 1", "night 2"), y_label=name, marks=(0,),
              series=(Series(name, (1.0, 2.0)), Series("bars " + name, (0.5, 1.5), style="bar"),
                      Series(name, (1.0, None), style="step"), Series(name, (0.1, 0.2), style="scatter"))),
        Chart(title=name, kind="heatmap", x=(name, "b"), y=(name,), matrix=((1.0, 2.0),)),
    ]


@pytest.mark.parametrize("chart", _charts(HOSTILE), ids=["series", "heatmap"])
def test_control_characters_in_every_label_never_reach_stderr_or_warnings(chart, capfd):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        [png] = draw(chart)
    out, err = capfd.readouterr()
    assert _is_png(png)
    shown = [out, err, *(str(w.message) for w in caught)]
    assert not any(raw in text for text in shown for raw in RAW), shown


def test_matplotlib_glyph_warning_is_emitted_again_through_safe_line():
    # Raw text straight to matplotlib (what _text prevents in draw): its own "Glyph 27 missing" warning
    # quotes the character raw, and safe_warnings must re-emit it escaped, same category.
    import matplotlib

    matplotlib.use("Agg", force=True)
    import io

    import matplotlib.pyplot as plt

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with safe_warnings():
            figure, axes = plt.subplots()
            axes.set_title("bell\x07 escape\x1b")
            figure.savefig(io.BytesIO(), format="png")
            plt.close(figure)
    glyphs = [w for w in caught if "Glyph" in str(w.message)]
    assert glyphs and all(issubclass(w.category, UserWarning) for w in glyphs)
    assert any("\\x1b" in str(w.message) for w in glyphs) and any("\\x07" in str(w.message) for w in glyphs)
    assert not any(raw in str(w.message) for w in caught for raw in RAW)


def test_warnings_before_a_failure_are_still_emitted_safely():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(ValueError, match="drawing failed"), safe_warnings():
            warnings.warn("font lacks \x1b[2J\nPASS all good", RuntimeWarning, stacklevel=1)
            raise ValueError("drawing failed")
    [warning] = caught
    assert warning.category is RuntimeWarning
    assert str(warning.message) == "font lacks \\x1b[2J\\nPASS all good"  # one line: no forged line of our own


@pytest.mark.parametrize("name", ["a$\\frac$b", "cost $5 and $6", "$", "$$", "model$^{2}$_v1"])
def test_dollar_signs_in_names_are_text_not_mathtext(name):
    # "$\frac$" failed the whole report with matplotlib's ParseSyntaxException (a ValueError) before.
    for chart in _charts(name):
        [png] = draw(chart)
        assert _is_png(png)
