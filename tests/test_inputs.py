"""Input specs, seeded random draws and sample files (including hostile ones)."""
from __future__ import annotations

import io
import pickle
import zipfile

import numpy as np
import pytest
import torch

from gapcheck.errors import ExitCode, InputError, UsageError, exit_code_for
from gapcheck.inputs import InputSpec, load_samples_file, parse_input_spec, random_samples, specs_from_samples

# --- parsing -------------------------------------------------------------------------------------


def test_parse_image_spec():
    spec = parse_input_spec("x:1x3x224x224:float32")
    assert spec == InputSpec("x", (1, 3, 224, 224), "float32")
    assert str(spec) == "x:1x3x224x224:float32"


def test_parse_spec_with_integer_range():
    spec = parse_input_spec("ids:1x16:int64:0,1000")
    assert spec == InputSpec("ids", (1, 16), "int64", 0.0, 1000.0)
    assert str(spec) == "ids:1x16:int64:0,1000"
    assert parse_input_spec(str(spec)) == spec


def test_parse_spec_with_float_range_and_alias():
    assert parse_input_spec("x:2x8:fp16:-0.5,0.5") == InputSpec("x", (2, 8), "float16", -0.5, 0.5)


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64", "int64", "int32", "int8", "uint8", "bool"])
def test_every_supported_dtype_parses(dtype):
    assert parse_input_spec(f"v:4:{dtype}").dtype == dtype


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("x:1x3", "3 or 4 ':'-separated parts"),
        ("x:1x3:float32:0,1:extra", "3 or 4"),
        (":1x3:float32", "name must be non-empty"),
        ("my x:1x3:float32", "no spaces"),
        ("x:1x3xa:float32", "non-integer dimension 'a'"),
        ("x:1,3:float32", "non-integer dimension '1,3'"),
        ("x:1x0x3:float32", "dimension 0; each must be >= 1"),
        ("x:1x3:float128", "unknown dtype 'float128'"),
        ("x:1x3:bfloat16", "bfloat16 inputs are not supported"),
        ("x:1x3:float32:0", "must be 'low,high'"),
        ("x:1x3:float32:a,b", "not two numbers"),
        ("x:1x3:float32:1,1", "low < high"),
        ("x:1x3:float32:0,inf", "finite"),
        ("ids:1x3:int64:0.5,10", "whole numbers"),
        ("px:1x3:uint8:0,300", "does not fit uint8"),
        ("px:1x3:int8:-129,0", "does not fit int8"),
        ("m:1x3:bool:0,1", "bool input takes no range"),
        ("h:1x3:float16:0,1e6", "float16 maximum"),
    ],
)
def test_bad_specs_name_the_problem(text, problem):
    with pytest.raises(UsageError, match=problem) as info:
        parse_input_spec(text)
    assert repr(text) in str(info.value) or text in str(info.value)
    assert exit_code_for(info.value) == ExitCode.USAGE


# --- random draws --------------------------------------------------------------------------------


SPECS = [
    InputSpec("x", (1, 3, 4, 4), "float32"),
    InputSpec("ids", (1, 16), "int64", 5, 9),
    InputSpec("mask", (1, 16), "bool"),
    InputSpec("h", (2, 2), "float16", -1, 1),
    InputSpec("px", (1, 8), "uint8", 0, 256),
]


def test_random_samples_have_the_declared_shapes_dtypes_and_ranges():
    samples = random_samples(SPECS, num_samples=3, seed=1)
    assert len(samples) == 3
    for sample in samples:
        assert list(sample) == ["x", "ids", "mask", "h", "px"]
        for spec in SPECS:
            assert sample[spec.name].shape == spec.shape
            assert sample[spec.name].dtype == np.dtype(spec.dtype)
        assert sample["ids"].min() >= 5 and sample["ids"].max() < 9
        assert sample["h"].min() >= -1 and sample["h"].max() <= 1
        assert set(np.unique(sample["mask"])) <= {False, True}


def test_unbounded_floats_are_standard_normal():
    draws = random_samples([InputSpec("x", (1, 20000), "float32")], seed=3)[0]["x"]
    assert abs(float(draws.mean())) < 0.05 and abs(float(draws.std()) - 1) < 0.05
    assert draws.min() < -2 and draws.max() > 2


def test_unbounded_ints_use_the_default_range():
    draws = random_samples([InputSpec("ids", (1, 1000), "int32")])[0]["ids"]
    assert draws.min() >= 0 and draws.max() < 10 and len(np.unique(draws)) > 1


def test_same_seed_same_arrays_and_other_seed_differs():
    first = random_samples(SPECS, num_samples=2, seed=7)
    again = random_samples(SPECS, num_samples=2, seed=7)
    other = random_samples(SPECS, num_samples=2, seed=8)
    for a, b in zip(first, again, strict=True):
        for name in a:
            np.testing.assert_array_equal(a[name], b[name])
    assert not np.array_equal(first[0]["x"], other[0]["x"])
    assert not np.array_equal(first[0]["x"], first[1]["x"])  # samples are independent draws


def test_sample_k_does_not_depend_on_num_samples():
    one = random_samples(SPECS, num_samples=1, seed=0)
    five = random_samples(SPECS, num_samples=5, seed=0)
    for name in one[0]:
        np.testing.assert_array_equal(one[0][name], five[0][name])


def test_adding_an_input_does_not_change_the_others():
    alone = random_samples(SPECS[:1], seed=0)[0]["x"]
    together = random_samples(SPECS, seed=0)[0]["x"]
    np.testing.assert_array_equal(alone, together)


def test_random_samples_rejects_bad_requests():
    with pytest.raises(UsageError, match="at least 1"):
        random_samples(SPECS, num_samples=0)
    with pytest.raises(UsageError, match="no inputs given"):
        random_samples([])
    with pytest.raises(UsageError, match="repeated: x"):
        random_samples([SPECS[0], SPECS[0]])
    with pytest.raises(UsageError, match="unsupported dtype 'complex64'"):
        random_samples([InputSpec("z", (1,), "complex64")])


def test_specs_from_samples_round_trip():
    samples = random_samples(SPECS, num_samples=2)
    specs = specs_from_samples(samples)
    assert [(s.name, s.shape, s.dtype) for s in specs] == [(s.name, s.shape, s.dtype) for s in SPECS]


def test_specs_from_samples_refuses_inconsistent_samples():
    with pytest.raises(InputError, match="no samples"):
        specs_from_samples([])
    with pytest.raises(InputError, match="sample 1 has inputs"):
        specs_from_samples([{"x": np.zeros(1)}, {"y": np.zeros(1)}])
    with pytest.raises(InputError, match="float32 in sample 1"):
        specs_from_samples([{"x": np.zeros(1)}, {"x": np.zeros(1, np.float32)}])


# --- .npz / .npy files ---------------------------------------------------------------------------


def test_npz_is_split_along_axis_0_keeping_the_batch_dim(tmp_path):
    x = np.arange(3 * 2 * 4, dtype=np.float32).reshape(3, 2, 4)
    ids = np.arange(3 * 5, dtype=np.int64).reshape(3, 5)
    np.savez(tmp_path / "data.npz", x=x, ids=ids)
    samples = load_samples_file(tmp_path / "data.npz")
    assert len(samples) == 3
    for i, sample in enumerate(samples):
        assert sample["x"].shape == (1, 2, 4) and sample["ids"].dtype == np.int64
        np.testing.assert_array_equal(sample["x"], x[i : i + 1])
        np.testing.assert_array_equal(sample["ids"], ids[i : i + 1])


def test_npz_follows_expected_name_order(tmp_path):
    np.savez_compressed(tmp_path / "data.npz", b=np.zeros((2, 1)), a=np.ones((2, 1)))
    samples = load_samples_file(tmp_path / "data.npz", expected_names=["a", "b"])
    assert list(samples[0]) == ["a", "b"]


def test_npy_single_input_takes_the_expected_name(tmp_path):
    np.save(tmp_path / "x.npy", np.zeros((4, 3), np.float32))
    samples = load_samples_file(tmp_path / "x.npy", expected_names=["pixels"])
    assert len(samples) == 4 and list(samples[0]) == ["pixels"] and samples[0]["pixels"].shape == (1, 3)
    assert list(load_samples_file(tmp_path / "x.npy")[0]) == ["input"]


def test_npz_disagreeing_sample_counts_are_listed(tmp_path):
    np.savez(tmp_path / "data.npz", x=np.zeros((3, 2)), ids=np.zeros((2, 2)))
    with pytest.raises(InputError, match=r"number of samples along axis 0 \(x: 3, ids: 2\)"):
        load_samples_file(tmp_path / "data.npz")


def test_names_not_matching_the_model_list_both(tmp_path):
    np.savez(tmp_path / "data.npz", image=np.zeros((1, 2)))
    with pytest.raises(InputError) as info:
        load_samples_file(tmp_path / "data.npz", expected_names=["x", "ids"])
    message = str(info.value)
    assert "names inputs image" in message and "expects x, ids" in message
    assert exit_code_for(info.value) == ExitCode.USAGE


def write_npz_member(path, name: str, npy_bytes: bytes) -> None:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(name, npy_bytes)


def npy_bytes(header: dict, payload: bytes) -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, header)
    return buffer.getvalue() + payload


@pytest.mark.parametrize(
    ("kind", "reason"),
    [
        ("missing", "not found"),
        ("empty", "empty"),
        ("random_bytes", "corrupt or not an npz archive"),
        ("truncated", "corrupt or not an npz archive"),
        ("object_array", "pickled Python objects"),
        ("huge_declared_shape", "declares 4000000000000 bytes"),
        ("no_samples", "0 samples"),
        ("no_arrays", "no arrays"),
        ("wrong_extension", "unsupported extension"),
        ("npy_object_array", "pickled Python objects"),
        ("npy_huge_declared_shape", "declares 4000000000000 bytes"),
    ],
)
def test_hostile_numpy_files(tmp_path, kind, reason):
    path = tmp_path / ("data.npy" if kind.startswith("npy") else "data.npz")
    if kind == "empty":
        path.write_bytes(b"")
    elif kind == "random_bytes":
        path.write_bytes(b"not a zip at all" * 64)
    elif kind == "truncated":
        np.savez(path, x=np.zeros((4, 100)))
        path.write_bytes(path.read_bytes()[:500])
    elif kind == "object_array":
        np.savez(path, x=np.array([{"a": 1}, None], dtype=object))
    elif kind == "huge_declared_shape":
        header = {"descr": "<f4", "fortran_order": False, "shape": (10**6, 10**6)}
        write_npz_member(path, "x.npy", npy_bytes(header, b"\0" * 64))
    elif kind == "no_samples":
        np.savez(path, x=np.zeros((0, 3)))
    elif kind == "no_arrays":
        np.savez(path)
    elif kind == "wrong_extension":
        path = tmp_path / "data.csv"
        path.write_text("1,2,3\n")
    elif kind == "npy_object_array":
        np.save(path, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    elif kind == "npy_huge_declared_shape":
        header = {"descr": "<f4", "fortran_order": False, "shape": (10**6, 10**6)}
        path.write_bytes(npy_bytes(header, b"\0" * 64))
    with pytest.raises(InputError, match=reason) as info:
        load_samples_file(path)
    assert "\n" not in str(info.value) and exit_code_for(info.value) == ExitCode.USAGE


def test_npz_over_the_size_limit_is_refused(tmp_path):
    np.savez(tmp_path / "data.npz", x=np.zeros((4, 1000), np.float32))
    with pytest.raises(InputError, match="more than the limit 1000"):
        load_samples_file(tmp_path / "data.npz", max_bytes=1000)


# --- .pt files -----------------------------------------------------------------------------------


def test_pt_single_tensor_is_batched_along_axis_0(tmp_path):
    torch.save(torch.arange(6, dtype=torch.float32).reshape(3, 2), tmp_path / "x.pt")
    samples = load_samples_file(tmp_path / "x.pt", expected_names=["image"])
    assert [list(s) for s in samples] == [["image"]] * 3
    np.testing.assert_array_equal(samples[2]["image"], np.array([[4.0, 5.0]], np.float32))
    assert list(load_samples_file(tmp_path / "x.pt")[0]) == ["input"]


def test_pt_single_tensor_for_a_multi_input_model(tmp_path):
    torch.save(torch.zeros(2, 3), tmp_path / "x.pt")
    with pytest.raises(InputError, match="single array, but the model takes 2 inputs"):
        load_samples_file(tmp_path / "x.pt", expected_names=["x", "ids"])


def test_pt_dict_of_tensors(tmp_path):
    torch.save({"x": torch.zeros(2, 3), "ids": torch.ones(2, 4, dtype=torch.int64)}, tmp_path / "d.pt")
    samples = load_samples_file(tmp_path / "d.pt", expected_names=["x", "ids"])
    assert len(samples) == 2
    assert samples[1]["ids"].dtype == np.int64 and samples[1]["ids"].shape == (1, 4)


def test_pt_list_of_dicts_is_one_sample_each(tmp_path):
    items = [{"x": torch.full((1, 3), float(i)), "len": torch.tensor([i])} for i in range(4)]
    torch.save(items, tmp_path / "l.pt")
    samples = load_samples_file(tmp_path / "l.pt")
    assert len(samples) == 4
    np.testing.assert_array_equal(samples[3]["x"], np.full((1, 3), 3.0, np.float32))


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        ("pickled_object", "pickled Python objects"),
        ("string", "holds a str"),
        ("empty_list", "empty list"),
        ("list_of_tensors", "item 0 is a Tensor, expected a dict"),
        ("non_tensor_value", "input 'x' is a list, expected a tensor"),
        ("non_string_key", "non-string key 3"),
        ("bfloat16", "bfloat16, which numpy cannot hold"),
        ("complex", "unsupported dtype torch.complex64"),
        ("mismatched_samples", "sample 1 has inputs"),
        ("mismatched_batch", r"x: 2, y: 3"),
        ("truncated", "corrupt or truncated archive"),
        ("random_bytes", "cannot read inputs file|pickled Python objects"),
    ],
)
def test_hostile_pt_files(tmp_path, payload, reason):
    path = tmp_path / "inputs.pt"
    if payload == "pickled_object":
        torch.save({"x": torch.nn.Linear(2, 2)}, path)
    elif payload == "string":
        torch.save("hello", path)
    elif payload == "empty_list":
        torch.save([], path)
    elif payload == "list_of_tensors":
        torch.save([torch.zeros(1)], path)
    elif payload == "non_tensor_value":
        torch.save({"x": [1, 2]}, path)
    elif payload == "non_string_key":
        torch.save({3: torch.zeros(1)}, path)
    elif payload == "bfloat16":
        torch.save({"x": torch.zeros(1, 2, dtype=torch.bfloat16)}, path)
    elif payload == "complex":
        torch.save({"x": torch.zeros(1, 2, dtype=torch.complex64)}, path)
    elif payload == "mismatched_samples":
        torch.save([{"x": torch.zeros(1)}, {"y": torch.zeros(1)}], path)
    elif payload == "mismatched_batch":
        torch.save({"x": torch.zeros(2, 1), "y": torch.zeros(3, 1)}, path)
    elif payload == "truncated":
        torch.save({"x": torch.zeros(64, 64)}, path)
        path.write_bytes(path.read_bytes()[:300])
    elif payload == "random_bytes":
        path.write_bytes(pickle.dumps(object) + b"\x00" * 32)
    with pytest.raises(InputError, match=reason) as info:
        load_samples_file(path)
    assert "\n" not in str(info.value) and "Traceback" not in str(info.value)


def test_empty_shape_is_a_scalar_input_and_draws_rank_0():
    spec = parse_input_spec("sr::int64:8000,48001")
    assert spec.shape == () and str(spec) == "sr::int64:8000,48001"
    (sample,) = random_samples([spec, parse_input_spec("x:1x4:float32")], 1)
    assert sample["sr"].shape == () and 8000 <= int(sample["sr"]) < 48001


def test_npz_scalar_is_given_to_every_sample_as_it_is(tmp_path):
    path = tmp_path / "data.npz"
    np.savez(path, x=np.zeros((3, 4), np.float32), sr=np.int64(16000))
    samples = load_samples_file(path, ["x", "sr"])
    assert len(samples) == 3
    assert all(s["x"].shape == (1, 4) and s["sr"].shape == () and int(s["sr"]) == 16000 for s in samples)


@pytest.mark.parametrize("shape", [(1000000, 1000000), (10**12,), (2, 2**28)])
def test_shapes_over_the_element_limit_are_refused_before_allocating(shape):
    spec = InputSpec("x", shape, "float32")
    with pytest.raises(UsageError, match="elements, more than the limit") as info:
        random_samples([spec], 1)
    assert exit_code_for(info.value) == ExitCode.USAGE
    assert random_samples([InputSpec("x", (4, 4), "float32")], 1, max_elements=16)[0]["x"].shape == (4, 4)
    with pytest.raises(UsageError):
        random_samples([InputSpec("x", (4, 5), "float32")], 1, max_elements=16)


def test_sparse_tensor_in_a_pt_file_is_a_clear_input_error(tmp_path):
    import torch

    path = tmp_path / "inputs.pt"
    torch.save({"x": torch.eye(4).to_sparse()}, path)
    with pytest.raises(InputError, match="sparse tensor .*to_dense") as info:
        load_samples_file(path, ["x"])
    assert exit_code_for(info.value) == ExitCode.USAGE


def test_the_whole_set_of_draws_is_checked_before_the_first_one():
    """A modest shape times an absurd sample count (or batch size) is refused up front, never a MemoryError later."""
    spec = parse_input_spec("x:1x3x32x32:float32")
    with pytest.raises(UsageError, match="1,000,000,000,000 samples of 3,072 elements"):
        random_samples([spec], 10**12)
    assert len(random_samples([spec], 4, max_elements=4 * 3072)) == 4
    with pytest.raises(UsageError, match="more than the limit"):
        random_samples([spec], 5, max_elements=4 * 3072)


def test_a_malformed_element_limit_in_the_environment_is_a_config_error(monkeypatch):
    from gapcheck.errors import ConfigError
    from gapcheck.limits import max_elements

    monkeypatch.setenv("GAPCHECK_MAX_ELEMENTS", "abc")
    with pytest.raises(ConfigError, match="GAPCHECK_MAX_ELEMENTS"):
        max_elements()
    monkeypatch.setenv("GAPCHECK_MAX_ELEMENTS", "1000")
    assert max_elements() == 1000


# --- names: the golden manifest's rule, applied before any work (issue 23 attacker round 5 #8) ----------------------


@pytest.mark.parametrize("name", ["x\x1b[2J", "x\x07", "x\x00", "x\x7f", "\u200ex", "a" * 257, ""])
def test_a_name_the_manifest_would_refuse_is_refused_in_the_spec(name):
    from gapcheck.golden.manifest import TensorEntry

    with pytest.raises(UsageError, match="printable characters") as info:
        parse_input_spec(f"{name}:1x3:float32")
    assert "\x1b" not in str(info.value) and "\x07" not in str(info.value)
    with pytest.raises(ValueError):  # noqa: PT011 - pydantic's ValidationError: the same rule, one definition
        TensorEntry(name=name, dtype="float32", shape=[1, 3])


def test_the_longest_name_the_manifest_takes_is_taken():
    assert parse_input_spec(f"{'a' * 256}:1x3:float32").name == "a" * 256


def test_golden_record_refuses_an_escape_in_a_name_before_any_work(tmp_path):
    from gapcheck.cli.app import main
    from tests.nightly.conftest import FACTORY

    out = tmp_path / "nb7"
    assert main(["golden", "record", "--model", FACTORY, "--input", "x\x1b[2J:1x3x8x8:float32", "--out", str(out),
                 "--num-samples", "2"]) == 2
    assert not out.exists()
