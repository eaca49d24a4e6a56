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


def test_huge_charts_stay_cheap_to_draw(monkeypatch):
    """100k bars, 5,000 marks, a 3,000-column heatmap (issue 23: 56 s, 7 s and 9 s in matplotlib before): bars past
    the bound are one filled step line, marks past it are counted, tick labels are thinned; each is still a PNG."""
    import matplotlib.axes

    drawn: dict[str, int] = {"bars": 0, "annotations": 0, "ticks": 0}
    for name, key, size in (("bar", "bars", lambda a: len(a[0])), ("annotate", "annotations", lambda a: 1),
                            ("set_xticklabels", "ticks", lambda a: len(a[0]))):
        original = getattr(matplotlib.axes.Axes, name)

        def spy(self, *args, _original=original, _key=key, _size=size, **kwargs):
            drawn[_key] = max(drawn[_key], _size(args)) if _key != "annotations" else drawn[_key] + 1
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(matplotlib.axes.Axes, name, spy)
    n = 100_000
    x = tuple(f"f{i}" for i in range(n))
    charts = [Chart("bars", kind="bar", x=x, series=(Series("n", tuple(float(i % 97) for i in range(n))),)),
              Chart("marks", x=x[:5000], series=(Series("e", tuple(1.0 for _ in range(5000))),), marks=tuple(range(5000))),
              Chart("heat", kind="heatmap", x=x[:3000], y=("a", "b"), matrix=(tuple(float(i % 7) for i in range(3000)),) * 2)]
    for chart in charts:
        assert all(_is_png(png) for png in draw(chart))
    assert drawn == {"bars": 0, "annotations": 20, "ticks": 40}


def test_a_chart_of_many_series_draws_no_legend(monkeypatch):
    import matplotlib.axes

    legends = []
    original = matplotlib.axes.Axes.legend
    monkeypatch.setattr(matplotlib.axes.Axes, "legend", lambda self, *a, **k: legends.append(1) or original(self, *a, **k))
    many = Chart("many", x=("a", "b"), series=tuple(Series(f"s{j}", (1.0, float(j))) for j in range(200)))
    few = Chart("few", x=("a", "b"), series=(Series("s", (1.0, 2.0)),))
    assert _is_png(draw(many)[0]) and _is_png(draw(few)[0]) and legends == [1]
