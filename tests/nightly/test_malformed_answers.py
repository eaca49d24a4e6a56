"""What nightly says about answers that are wrong in form, not only in value (review items of 2026-12-04).

- An answer the client refuses to read (an output named twice, data that does not fit its declared shape, a negative
  dimension) comes from a server that is up and answered: ``endpoint_malformed_answer``, a gap (exit 1, status
  ``new_failure``), not ``endpoint_unreachable`` (exit 3).
- An all-NaN answer fails as "max |err| inf": the message and evidence say how many served values were NaN (and inf).
- Pairing messages call the golden side the golden bundle's, and names that are not plain ASCII are shown escaped.
"""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from gapcheck.cli.app import main
from gapcheck.errors import UsageError
from gapcheck.golden import load_bundle
from tests.nightly.conftest import validate_report
from tests.nightly.fake_triton import FakeTriton


class _Answers(FakeTriton):
    """The fake server of fake_triton.py, answering inference in the way ``mode`` names (the golden values else)."""

    def answer(self, count: int, first: int) -> list[dict]:
        outputs = super().answer(count, first)
        right = outputs[0]
        if self.mode == "twice":  # the right copy first: tritonclient would read it and drop the other unsaid
            return [right, dict(right, data=[9.0] * len(right["data"]))]
        if self.mode == "negative":  # numpy would reshape [n, -k] as [n, k]: right values, impossible shape
            return [dict(right, shape=[right["shape"][0], -int(np.prod(right["shape"][1:]))])]
        if self.mode == "misfit":  # one value short of the declared shape
            return [dict(right, data=right["data"][:-1])]
        if self.mode == "nan":
            return [dict(right, data=[float("nan")] * len(right["data"]))]
        if self.mode == "nan_inf":  # half NaN, one inf, the rest right
            data = list(right["data"])
            half = len(data) // 2
            return [dict(right, data=[float("nan")] * half + [float("inf")] + data[half + 1:])]
        return outputs


def _night(tiny_golden: Path, tmp_path: Path, mode: str) -> tuple[int, dict]:
    report = tmp_path / f"{mode}.json"
    with _Answers(load_bundle(tiny_golden), mode) as fake:
        code = main(["nightly", "--golden", str(tiny_golden), "--endpoint", f"e={fake.url}", "--history",
                     str(tmp_path / f"{mode}.sqlite"), "--retries", "0", "--no-audit", "--json", str(report)])
    document = json.loads(report.read_text())
    validate_report(document, "nightly")
    return code, document


@pytest.mark.parametrize("mode, said", [
    ("twice", "answered output 'output' 2 times"),
    ("negative", "declares the shape"),
    ("misfit", "cannot be read as the array it declares"),
])
def test_a_malformed_answer_is_the_deployments_gap_not_an_outage(tiny_golden, tmp_path, capsys, mode, said):
    code, document = _night(tiny_golden, tmp_path, mode)
    capsys.readouterr()
    assert code == 1, document["findings"]  # was 3: endpoint_unreachable, "could not be checked"
    (endpoint,) = document["endpoints"]
    assert endpoint["status"] == "new_failure" and endpoint["reachable"] is True, endpoint
    codes = [f["code"] for f in document["findings"]]
    assert "endpoint_unreachable" not in codes, codes
    (finding,) = [f for f in document["findings"] if f["code"] == "endpoint_malformed_answer"]
    assert finding["severity"] == "gap" and said in finding["message"], finding["message"]
    assert "answered the golden inputs with a malformed response" in finding["message"]
    assert "deployment gap: endpoint_malformed_answer" in endpoint["headline"], endpoint["headline"]


def test_a_server_that_is_down_is_still_unreachable(tiny_golden, tmp_path, capsys):
    """Only answers the client refused to read are the deployment's: a body that is no inference response at all
    (not JSON) says nothing about the model, and stays unreachable (exit 3)."""
    code, document = _night(tiny_golden, tmp_path, "garbage")
    capsys.readouterr()
    assert code == 3 and "endpoint_malformed_answer" not in [f["code"] for f in document["findings"]]


@pytest.mark.parametrize("mode", ["nan", "nan_inf"])
def test_nan_answers_say_how_many_served_values_were_nan(tiny_golden, tmp_path, capsys, mode):
    code, document = _night(tiny_golden, tmp_path, mode)
    capsys.readouterr()
    assert code == 1
    (mismatch,) = [f for f in document["findings"] if f["code"] == "golden_mismatch"]
    evidence = mismatch["evidence"]
    reference = load_bundle(tiny_golden).reference["output"]
    assert evidence["served_values"] == reference.size
    if mode == "nan":  # every batch of the night answered NaN: "max |err| inf" said nothing of it
        assert evidence["served_nan"] == reference.size and evidence["served_inf"] == 0
        assert f"({reference.size} NaN of {reference.size} served values)" in mismatch["message"], mismatch["message"]
        assert f"{reference.size} NaN of" in document["endpoints"][0]["headline"]
    else:
        assert evidence["served_nan"] > 0 and evidence["served_inf"] > 0
        assert f"{evidence['served_nan']} NaN and {evidence['served_inf']} inf of" in mismatch["message"]


def test_a_clean_night_counts_no_nan(tiny_golden, tmp_path, capsys):
    code, document = _night(tiny_golden, tmp_path, "ok")
    capsys.readouterr()
    assert code == 0 and "NaN" not in json.dumps(document["endpoints"])


# --- the golden bundle's side, and names that look alike -------------------------------------------------------

def _t(name, data_type="TYPE_FP32", shape=(None, 10)):
    return SimpleNamespace(name=name, data_type=data_type, shape=shape)


def test_nightly_pairing_says_golden_bundle_not_graph(tiny_golden):
    from gapcheck.nightly.config import EndpointSpec
    from gapcheck.nightly.probe import ServedFacts, paired_names

    bundle = load_bundle(tiny_golden)
    info = bundle.output_infos[0]
    metadata = {"name": "m", "versions": ["1"], "platform": "onnxruntime_onnx",
                "inputs": [{"name": "INPUT__0", "datatype": "FP32", "shape": [-1, *bundle.input_infos[0].shape[1:]]}],
                "outputs": [{"name": "OUTPUT__0", "datatype": "FP32", "shape": [-1, *info.shape[1:]]}]}
    facts = ServedFacts("1", None, None, ["OUTPUT__0"], metadata, None)
    spec = EndpointSpec(name="prod", address="127.0.0.1:1", protocol="http", ssl=False, model="m",
                        input_map={"x": "INPUT_0"})  # a typo for INPUT__0
    with pytest.raises(UsageError) as caught:
        paired_names(spec, bundle, facts, [])
    assert "the golden bundle's inputs are 'x'" in caught.value.message and "graph" not in caught.value.message


def test_the_pairing_problem_names_the_golden_bundle_and_golden_equals_served():
    from gapcheck.triton.names import pair_tensors

    pairing = pair_tensors("output", [_t("logits"), _t("aux")], [_t("OUTPUT__0", shape=(None, 3))],
                           side="golden bundle")
    assert pairing.problem is not None and "the golden bundle's output(s) 'logits', 'aux'" in pairing.problem
    assert "GOLDEN=SERVED" in pairing.problem and "graph" not in pairing.problem


def test_a_lookalike_served_name_is_shown_escaped_in_nightly_messages(tiny_golden):
    """'OUTPUТ__0' (a Cyrillic Te) beside 'OUTPUT__0': both looked the same in the message."""
    from gapcheck.nightly.config import EndpointSpec
    from gapcheck.nightly.probe import _missing_outputs

    bundle = load_bundle(tiny_golden)
    spec = EndpointSpec(name="prod", address="127.0.0.1:1", protocol="http", ssl=False, model="m",
                        output_map={"output": "OUTPUT__0"})
    (finding,) = _missing_outputs(spec, bundle, ["OUTPU\u0422__0"])
    assert "'OUTPUT__0'" in finding.message and "'OUTPU\\u0422__0'" in finding.message, finding.message
    assert "\u0422" not in finding.message
