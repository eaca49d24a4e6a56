"""The pytest plugin, run with pytester: options, the profile breakdown, the fixtures, a light start-up."""
import os
import subprocess
import sys

import pytest

pytest_plugins = ["pytester"]


@pytest.fixture(scope="module", autouse=True)
def _profiler_loaded_outside():
    """In-process pytester drops modules first imported inside a run; torch's profiler pulls in modules that
    register operator libraries, and gapcheck's code catalogs register codes: neither may be imported twice.
    Load them once, out here."""
    import torch
    from torch.profiler import profile

    from gapcheck import guards
    from gapcheck.codes import all_codes

    for name in guards.__all__:  # every guards module
        getattr(guards, name)
    all_codes()  # every code catalog (a raised guard looks its code up, which loads them all)
    import gapcheck.report.formats.json_format  # noqa: F401 - profile_steps(trace=...) checks the path with it

    with profile() as prof:
        torch.ones(2).sum()
    prof.events()

TRAINING_TESTS = '''
import time
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset, default_collate


def slow_collate(batch):
    time.sleep(0.05)  # the planted starvation
    return default_collate(batch)


def test_starved_loop():
    data = TensorDataset(torch.randn(32, 8), torch.randn(32, 1))
    model = nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in DataLoader(data, batch_size=8, collate_fn=slow_collate):
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
'''


def test_options_are_registered_through_the_entry_point(pytester):
    result = pytester.runpytest_subprocess("--help")
    result.stdout.fnmatch_lines(["*--gapcheck-profile*", "*--profile-gpu*", "*--gapcheck-seed*"])


@pytest.mark.parametrize("flag", ["--gapcheck-profile", "--profile-gpu"])
def test_profile_flag_adds_a_breakdown_naming_the_bottleneck(pytester, flag):
    pytester.makepyfile(test_train=TRAINING_TESTS)
    result = pytester.runpytest(flag, "-rA", "--junitxml=junit.xml")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([
        "*gapcheck step-time breakdown*",
        "*test_starved_loop*data loading",
        "*test_starved_loop: data loading is *% of step time: raise num_workers, use pin_memory, or decode faster",
    ])
    if flag == "--profile-gpu":
        result.stdout.fnmatch_lines(["*no CUDA device here, CPU activity only*"])
    assert "gapcheck_profile" in (pytester.path / "junit.xml").read_text()  # the breakdown reaches JUnit


def test_without_the_flag_nothing_is_profiled(pytester):
    pytester.makepyfile(test_train=TRAINING_TESTS)
    result = pytester.runpytest()
    result.assert_outcomes(passed=1)
    assert "gapcheck step-time breakdown" not in result.stdout.str()


def test_fixtures_catch_planted_bugs_and_pass_clean_models(pytester):
    pytester.makepyfile(test_models='''
import pytest
import torch
from torch import nn
from gapcheck.guards import GradientError, NonFiniteError


class Clean(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        return {"logits": self.fc(x), "aux": [self.fc.weight.sum()]}


class Unused(Clean):
    def __init__(self):
        super().__init__()
        self.forgotten = nn.Linear(4, 4)


class Overflowing(Clean):
    def forward(self, x):
        return torch.log(self.fc(x) - 1e9)


def test_clean_model(tensor_health):
    report = tensor_health.check(Clean(), torch.randn(3, 4))
    assert report.ok and report.outputs == 2 and report.gradients.checked == 2


def test_unused_parameter_is_named(tensor_health):
    with pytest.raises(GradientError, match="forgotten.weight"):
        tensor_health.check(Unused(), torch.randn(3, 4))


def test_nan_output_is_named(tensor_health):
    with pytest.raises(NonFiniteError, match="output"):
        tensor_health.check(Overflowing(), torch.randn(3, 4))


def test_seeded_first(gapcheck_guards):
    pytest.shared = torch.rand(3)


def test_seeded_second(gapcheck_guards):
    assert torch.equal(torch.rand(3), pytest.shared)  # both tests start from --gapcheck-seed


def test_guards_are_detached_after_a_test(gapcheck_guards):
    model = Clean()
    pytest.model = model
    health = gapcheck_guards.gradient_health(model)
    model(torch.randn(2, 4))["logits"].sum().backward()
    assert health.checks == 1


def test_hooks_gone(gapcheck_guards):
    model = pytest.model
    model.fc.weight.register_hook(lambda g: g * float("nan"))
    model(torch.randn(2, 4))["logits"].sum().backward()  # would raise if the previous test's guard were attached


def test_profile_through_the_fixture(gapcheck_guards):
    model = Clean()
    batches = [torch.randn(4, 4) for _ in range(3)]
    report = gapcheck_guards.profile(lambda x: model(x)["logits"].sum().backward(), batches, steps=3, warmup=0)
    assert report.steps == 3
''')
    result = pytester.runpytest("-p", "no:randomly")
    result.assert_outcomes(passed=8)
    result.stdout.fnmatch_lines(["*gapcheck step-time breakdown*", "*test_profile_through_the_fixture*"])


def test_plugin_start_up_imports_no_torch(pytester):
    pytester.makepyfile(test_light='''
import sys

def test_nothing_heavy_loaded():
    assert "torch" not in sys.modules and "numpy" not in sys.modules
''')
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    code = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "gapcheck.guards.pytest_plugin",
                           "-p", "no:cacheprovider", str(pytester.path / "test_light.py")],
                          capture_output=True, text=True, env=env, cwd=pytester.path, timeout=120)
    assert code.returncode == 0, code.stdout + code.stderr


def test_a_test_that_profiles_itself_is_reported_as_not_profiled(pytester):
    pytester.makepyfile(test_self='''
import torch
from gapcheck.guards import profile_steps


def test_own_trace(tmp_path):
    report = profile_steps(lambda b: b.sum(), [torch.ones(4)], steps=2, warmup=0, trace=tmp_path / "t.json")
    assert (tmp_path / "t.json").exists() and report.steps == 2
''')
    result = pytester.runpytest("--gapcheck-profile", "-rA")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*not profiled: the test ran its own torch.profiler*"])
