"""Every path key from a config file is relative to that file; from the environment or a flag, to the working folder
(issue 18 review D1: ``[triton] ssl_root_cert = "ca.pem"`` beside the config made ``gapcheck nightly --config
cfgdir/g.toml`` exit 2 "TLS file ca.pem does not exist"; ``[cache] dir`` the same)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from gapcheck.cli.groups import Groups, declare
from gapcheck.groups import ExportSpec, TritonTarget
from gapcheck.groups.data import LeakageSpec
from tests.triton.test_tls import make_certificates


def _resolved(group: type, section: str | None, args: list[str], env: dict[str, str] | None = None) -> Any:
    """The group as one command run resolves it (the CLI's one path: cli.groups.resolve)."""
    seen: dict[str, Any] = {}
    app = typer.Typer()

    @app.command()
    @declare(group, section=section)
    def command(groups: Groups) -> None:
        seen["group"] = groups[group]

    @app.command("other")
    def other() -> None:  # two commands: typer then keeps the command name
        pass

    result = CliRunner().invoke(app, ["command", *args], env=env)
    assert result.exit_code == 0, result.output
    return seen["group"]


@pytest.fixture
def cfgdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cfgdir"
    folder.mkdir()
    (folder / "labels.csv").write_text("x\n")
    real = make_certificates(folder)  # TLS files are parsed before any connection: real PEM files
    for name, which in (("ca.pem", "ca"), ("key.pem", "key"), ("chain.pem", "cert")):
        (folder / name).write_bytes(real[which].read_bytes())
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    for name in ("GAPCHECK_TRITON__SSL_ROOT_CERT", "GAPCHECK_CACHE__DIR"):
        monkeypatch.delenv(name, raising=False)
    return folder


def test_triton_tls_files_are_relative_to_the_config_file(cfgdir: Path) -> None:
    (cfgdir / "g.toml").write_text('[triton]\nssl_root_cert = "ca.pem"\nssl_private_key = "key.pem"\n'
                                   'ssl_cert_chain = "chain.pem"\n')
    target = _resolved(TritonTarget, "nightly", ["--config", str(cfgdir / "g.toml")])
    assert (target.ssl_root_cert, target.ssl_private_key, target.ssl_cert_chain) == (
        cfgdir / "ca.pem", cfgdir / "key.pem", cfgdir / "chain.pem")


def test_the_command_section_too(cfgdir: Path) -> None:
    (cfgdir / "g.toml").write_text('[leakage]\nlabels = "labels.csv"\n')
    assert _resolved(LeakageSpec, "leakage", ["--config", str(cfgdir / "g.toml")]).labels == cfgdir / "labels.csv"


def test_cache_dir_is_relative_to_the_config_file(cfgdir: Path) -> None:
    (cfgdir / "g.toml").write_text('[cache]\ndir = "cache"\n')
    assert _resolved(ExportSpec, "export_diff", ["--config", str(cfgdir / "g.toml")]).cache_dir == cfgdir / "cache"


def test_the_environment_and_flags_are_relative_to_the_working_folder(cfgdir: Path) -> None:
    (cfgdir / "g.toml").write_text('[cache]\ndir = "cache"\n[triton]\nssl_root_cert = "ca.pem"\n')
    (Path.cwd() / "mine.pem").write_bytes((cfgdir / "ca.pem").read_bytes())
    config = ["--config", str(cfgdir / "g.toml")]
    spec = _resolved(ExportSpec, "export_diff", config, env={"GAPCHECK_CACHE__DIR": "envcache"})
    assert spec.cache_dir == Path("envcache")
    assert _resolved(ExportSpec, "export_diff", [*config, "--cache-dir", "flagcache"]).cache_dir == Path("flagcache")
    target = _resolved(TritonTarget, "nightly", [*config, "--triton-ssl-root-cert", "mine.pem"])
    assert target.ssl_root_cert == Path("mine.pem")
    target = _resolved(TritonTarget, "nightly", config, env={"GAPCHECK_TRITON__SSL_ROOT_CERT": "mine.pem"})
    assert target.ssl_root_cert == Path("mine.pem")


def test_an_absolute_path_in_the_file_is_kept(cfgdir: Path, tmp_path: Path) -> None:
    (cfgdir / "g.toml").write_text(f'[cache]\ndir = "{tmp_path / "abs"}"\n')
    assert _resolved(ExportSpec, "export_diff", ["--config", str(cfgdir / "g.toml")]).cache_dir == tmp_path / "abs"


def test_precision_calibration_is_relative_to_the_config_file(cfgdir: Path) -> None:
    from gapcheck.precision.spec import PrecisionSpec

    (cfgdir / "calib.npz").write_bytes(b"")
    (cfgdir / "g.toml").write_text('[precision]\ncalibration = "calib.npz"\n')
    spec = _resolved(PrecisionSpec, "precision", ["--config", str(cfgdir / "g.toml")])
    assert spec.calibration == cfgdir / "calib.npz"
