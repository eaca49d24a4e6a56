"""A text model end to end: ``golden record --text-samples --tokenizer hf:MiniLM`` fills a bundle with real sentences
tokenized by MiniLM's tokenizer; ``gapcheck nightly`` replays it to a live tritonserver serving the bundle's ONNX
export (Python backend running ONNX Runtime: the bundled server has no onnxruntime backend); and the tokenizer in
front of the endpoint, which nightly's replayed ids cannot see, is checked against the bundle by
:func:`gapcheck.text.bundle_check.check_bundle_tokenizer` — a changed tokenizer is named with its cause."""
from __future__ import annotations

import contextlib
import json
from pathlib import Path

import onnx
import pytest

from gapcheck.cli.app import main
from gapcheck.triton.local_server import ONNX_RUNNER_PY, LocalTritonServer
from tests.text.conftest import ORDINARY, record_text_bundle, text_recipe

ONNX_TYPES = {onnx.TensorProto.INT64: "TYPE_INT64", onnx.TensorProto.FLOAT: "TYPE_FP32"}




@pytest.fixture(scope="module")
def texts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("texts") / "reviews.jsonl"
    path.write_text("".join(json.dumps({"body": t}) + "\n" for t in ORDINARY), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory, texts: Path, minilm: Path) -> Path:
    return record_text_bundle(tmp_path_factory.mktemp("golden") / "bundle", texts, minilm,
                              tmp_path_factory.mktemp("export_cache"))


def _config(name: str, model: onnx.ModelProto) -> str:
    def entries(values) -> str:
        return ", ".join(
            f'{{ name: "{v.name}" data_type: {ONNX_TYPES[v.type.tensor_type.elem_type]} '
            f'dims: [ {", ".join(str(d.dim_value or -1) for d in v.type.tensor_type.shape.dim)} ] }}' for v in values)
    return (f'name: "{name}"\nbackend: "python"\nmax_batch_size: 0\ninput [ {entries(model.graph.input)} ]\n'
            f'output [ {entries(model.graph.output)} ]\ninstance_group [ {{ kind: KIND_CPU count: 1 }} ]\n')


@pytest.fixture(scope="module")
def served(bundle: Path, tmp_path_factory: pytest.TempPathFactory):
    """The bundle's own ONNX export behind a real tritonserver: int64 token ids in, hidden states out."""
    model = onnx.load(str(bundle / "model.onnx"))
    repo = tmp_path_factory.mktemp("repo")
    version = repo / "minilm_bert" / "1"
    version.mkdir(parents=True)
    onnx.save_model(model, str(version / "model.onnx"))
    (version / "model.py").write_text(ONNX_RUNNER_PY, encoding="utf-8")
    (repo / "minilm_bert" / "config.pbtxt").write_text(_config("minilm_bert", model), encoding="utf-8")
    with contextlib.ExitStack() as cleanup:
        server = LocalTritonServer(repo, workdir=tmp_path_factory.mktemp("triton_work"))
        cleanup.callback(server.stop)  # also when start-up fails half way
        yield server.start(timeout_s=120)


def test_the_text_bundle_holds_the_tokenized_sentences(bundle: Path):
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["samples"]["source"] == "text" and manifest["samples"]["count"] == 6
    assert [i["dtype"] for i in manifest["inputs"]] == ["int64"] * 3


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_nightly_replays_the_text_bundle_to_a_live_endpoint(served: LocalTritonServer, bundle: Path,
                                                             tmp_path: Path, protocol: str):
    report = tmp_path / "night.json"
    code = main(["nightly", "--golden", str(bundle), "--history", str(tmp_path / "h.sqlite"), "--retries", "1",
                 "--endpoint", f"bert={protocol}://{served.url(protocol)}/minilm_bert", "--json", str(report)])
    document = json.loads(report.read_text())
    assert code == 0, document["headline"]
    (endpoint,) = document["endpoints"]
    assert endpoint["status"] == "pass"
    sent = [r for r in endpoint["requests"]]
    assert sum(r["count"] for r in sent) == 6 and set(sent[0]["input_sha256"]) == {"input_ids", "attention_mask",
                                                                                     "token_type_ids"}


def test_the_same_tokenizer_reproduces_the_bundle(bundle: Path, texts: Path, minilm: Path):
    from gapcheck.text.bundle_check import check_bundle_tokenizer

    assert check_bundle_tokenizer(bundle, f"{texts}:body", text_recipe(minilm)) == ()
    assert check_bundle_tokenizer(bundle, f"{texts}:body", text_recipe(minilm, ",slow")) == ()  # slow agrees here


@pytest.mark.parametrize(("change", "cause"), [
    (",do_lower_case=false", "text_normalization"),
    (",add_special_tokens=false", "special_tokens"),
    (",padding_side=left", "padding"),
])
def test_a_changed_serving_tokenizer_is_named(bundle: Path, texts: Path, minilm: Path, change: str, cause: str):
    from gapcheck.text.bundle_check import check_bundle_tokenizer

    (finding,) = check_bundle_tokenizer(bundle, f"{texts}:body", text_recipe(minilm, change))
    assert finding.code == "golden_tokenizer_changed" and finding.is_gap
    assert cause in finding.evidence["causes"] and cause in finding.message
    assert finding.evidence["differing"] >= 1 and finding.evidence["recorded_tokenizer"] == text_recipe(minilm)


def test_other_strings_are_not_blamed_on_the_tokenizer(bundle: Path, tmp_path: Path, minilm: Path):
    from gapcheck.text.bundle_check import check_bundle_tokenizer

    other = tmp_path / "reviews.jsonl"
    other.write_text("".join(json.dumps({"body": " ".join(reversed(t.split()))}) + "\n" for t in ORDINARY), encoding="utf-8")
    (finding,) = check_bundle_tokenizer(bundle, f"{other}:body", text_recipe(minilm, ",do_lower_case=false"))
    assert finding.code == "golden_text_unreproduced" and not finding.is_gap  # which changed is not guessed
