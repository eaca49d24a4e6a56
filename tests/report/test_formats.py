"""Console and HTML formats over the report contract: views drawn, evidence labelled, outside text neutralized."""
from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

import pytest

from gapcheck.codes.export_diff import LAYER_DIVERGENCE, TRAINING_MODE
from gapcheck.errors import UsageError
from gapcheck.findings import Finding, Subject
from gapcheck.report.contract import Chart, ResultBase, Series, Table
from gapcheck.report.formats import FORMATS, ReportFormat, check_writable, render, write_report
from gapcheck.report.formats.console_format import shown_rows
from gapcheck.report.text import evidence_items, format_value, safe_text

HOSTILE = "<script>alert(1)</script>\x1b[2J\x07\u202e"


@dataclass(frozen=True)
class Demo(ResultBase):
    command: str = "demo"
    findings: tuple[Finding, ...] = ()
    headline: str = "demo headline"
    charts: bool = True

    def views(self) -> tuple[Any, ...]:
        table = Table("modules", ("module", "max abs"), ((HOSTILE, 1.5e-3), ("fc", None), ("act", 2.0)), highlight=(2,),
                      note="worst sample")
        if not self.charts:
            return (table,)
        line = Chart("error by depth", x=("conv", "bn", "act"), log_y=True, marks=(2,), y_label="|err|",
                     series=(Series("max abs", (1e-6, None, 0.5)), Series("budget", (1e-4, 1e-4, 1e-4), style="step")))
        bars = Chart("bars", kind="bar", x=("a", "b"), series=(Series("n", (1.0, 2.0)),))
        heat = Chart("heat", kind="heatmap", x=("c0", "c1"), y=("train",), matrix=((0.1, 0.9),))
        return (table, line, bars, heat)


def _finding() -> Finding:
    return LAYER_DIVERGENCE.finding(HOSTILE, subject=Subject(module="act"),
                                    evidence={"max_abs": 1.234567e-3, "failing_samples": list(range(12)),
                                              "order": {"ref_order": "RGB", "cand_order": "BGR"}, "kept": False})


def test_every_report_format_has_a_module_and_sarif_stays_a_member():
    assert ReportFormat.SARIF.value == "sarif"
    for fmt in (ReportFormat.JSON, ReportFormat.JUNIT, ReportFormat.HTML, ReportFormat.CONSOLE):
        assert fmt in FORMATS


def test_html_is_one_escaped_page_with_inline_charts_and_labelled_evidence():
    page = render(ReportFormat.HTML, Demo(findings=(_finding(),)))
    assert "<script>alert" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert page.count('src="data:image/png;base64,') == 3  # line, bar, heatmap
    png = page.split('src="data:image/png;base64,')[1].split('"')[0]
    assert base64.b64decode(png)[:8] == b"\x89PNG\r\n\x1a\n"
    assert "<dt>max abs</dt><dd>0.001235</dd>" in page
    assert "<dt>order</dt><dd>ref order: RGB; cand order: BGR</dd>" in page
    assert "... (4 more)" in page and "{&#39;" not in page and "{'" not in page
    assert '<tr class="hl"><td>act</td>' in page  # the highlighted row
    assert "http://" not in page and "https://" not in page  # self-contained


def test_html_without_findings_or_views():
    page = render(ReportFormat.HTML, Demo(charts=False))
    assert "No findings." in page and ">PASS<" in page


def test_console_neutralizes_control_characters_and_lists_charts():
    text = render(ReportFormat.CONSOLE, Demo(findings=(_finding(), TRAINING_MODE.finding("warned"))))
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text
    assert "\\x1b[2J" in text and "<script>" in text  # shown, harmless, not swallowed
    assert "charts in the HTML report: error by depth; bars; heat" in text
    assert "GAP     layer_divergence act:" in text and "WARNING training_mode" in text
    assert text.rstrip().endswith("GAP demo headline")


def test_shown_rows_keep_highlighted_rows_first():
    table = Table("t", ("a",), tuple((str(i),) for i in range(10)), highlight=(7, 9))
    assert shown_rows(table, 3) == [0, 7, 9]
    assert shown_rows(table, None) == list(range(10))


def test_safe_text_and_values():
    assert safe_text("a\x1b[31mb\tc\n") == "a\\x1b[31mb\tc\n"
    assert safe_text("rtl\u202eevil") == "rtl\\u202eevil"
    assert format_value(float("nan")) == "nan" and format_value(True) == "yes" and format_value(None) == "-"
    assert evidence_items({"max_abs": 2, "x": [1.0, 2.5]}) == [("max abs", "2"), ("x", "1, 2.5")]


def test_reports_are_written_atomically_and_bad_paths_refused(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(UsageError, match="not a directory"):
        check_writable(tmp_path / "file" / "r.html")
    with pytest.raises(UsageError, match="is a directory"):
        check_writable(tmp_path)
    path = write_report(ReportFormat.HTML, tmp_path / "deep" / "r.html", Demo(charts=False))
    assert path.read_text().startswith("<!DOCTYPE html>")
    assert [p.name for p in path.parent.iterdir()] == ["r.html"]  # no temp file left behind


def test_report_paths_that_a_rename_would_replace_are_refused(tmp_path):
    """A link, a FIFO or a device at the report path is refused (exit 2), never replaced by the atomic rename."""
    import os

    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    (tmp_path / "link.html").symlink_to(victim)
    (tmp_path / "dangling.html").symlink_to(tmp_path / "nowhere")
    os.mkfifo(tmp_path / "fifo.html")
    for name, says in (("link.html", "symbolic link"), ("dangling.html", "symbolic link"), ("fifo.html", "regular file")):
        with pytest.raises(UsageError, match=says):
            write_report(ReportFormat.HTML, tmp_path / name, Demo(charts=False))
    with pytest.raises(UsageError, match="regular file"):
        check_writable("/dev/null")
    assert victim.read_text() == "keep" and (tmp_path / "link.html").is_symlink()
    assert not (tmp_path / "nowhere").exists()


def test_an_uncreatable_report_folder_is_refused_before_any_work_and_reports_follow_the_umask(tmp_path):
    import os
    import stat

    with pytest.raises(UsageError, match="cannot create a file in /proc|/proc is not writable"):
        check_writable("/proc/gapcheck-report.html")  # root may "access" /proc, but nothing can be created there
    previous = os.umask(0o022)
    try:
        path = write_report(ReportFormat.JSON, tmp_path / "r.json", Demo(charts=False))
    finally:
        os.umask(previous)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]  # the probe file is gone


def test_images_chart_shows_its_pngs_side_by_side_with_escaped_captions():
    png = base64.b64encode(b"\x89PNG\r\n\x1a\nfake").decode()

    @dataclass(frozen=True)
    class Pictures(ResultBase):
        command: str = "demo"
        headline: str = "pictures"

        def views(self) -> tuple[Any, ...]:
            return (Chart("worst samples", kind="images", images=(("train <b>", png), ("infer", png))),)

    page = render(ReportFormat.HTML, Pictures())
    assert page.count(f"base64,{png}") == 2 and '<div class="figures">' in page
    assert "<figcaption>train &lt;b&gt;</figcaption>" in page and 'alt="worst samples"' in page


def test_a_result_that_could_not_run_fully_closes_with_incomplete_not_gap():
    """An endpoint that is down (exit 3) is not a gap in the model: the closing line says INCOMPLETE."""
    from gapcheck.report.formats import console_format

    @dataclass(frozen=True)
    class Partial(Demo):
        @property
        def exit_code(self) -> int:
            return 3

    finding = LAYER_DIVERGENCE.finding("x", subject=Subject(module="act"))
    assert console_format.render(Partial(findings=(finding,), charts=False)).splitlines()[-1].startswith("INCOMPLETE")
    assert console_format.render(Demo(findings=(finding,), charts=False)).splitlines()[-1].startswith("GAP")
