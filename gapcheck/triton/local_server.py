"""Start and stop a real Triton Inference Server on loopback, from the binary the ``nvidia-pytriton`` wheel bundles.

The wheel pins ``numpy<2``, so the server runs out of a virtual environment of its own
(``.venv-triton``, made by ``scripts/setup_triton_env.sh``); gapcheck itself only talks to
it over HTTP/gRPC. Python-backend models (``model.py``) run in Triton's stub process,
which embeds that environment's interpreter: the stub needs the interpreter's own
``LIBDIR`` on ``LD_LIBRARY_PATH`` (otherwise it picks up the system libpython and dies at
start) and the environment's site-packages on ``PYTHONPATH`` (numpy 1.x, onnxruntime).

Used by the test suite's session fixture and by ``scripts/triton_server.py``.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from gapcheck.errors import EndpointError, InputError

logger = logging.getLogger(__name__)

VENV_ENV_VAR = "GAPCHECK_TRITON_VENV"
DEFAULT_VENV_NAME = ".venv-triton"


@dataclass(frozen=True)
class TritonDistribution:
    """Where the bundled server, its libraries and the Python interpreter for the stub live."""

    venv: Path
    python_version: str  # "3.11"
    python_libdir: Path  # sysconfig LIBDIR of the venv's interpreter
    site_packages: Path
    server_root: Path  # .../site-packages/pytriton/tritonserver
    libs: Path  # .../site-packages/nvidia_pytriton.libs

    @property
    def binary(self) -> Path:
        return self.server_root / "bin" / "tritonserver"

    @property
    def stub(self) -> Path:
        return self.server_root / "python_backend_stubs" / self.python_version / "triton_python_backend_stub"


@dataclass(frozen=True)
class ServerPorts:
    http: int
    grpc: int
    metrics: int


def default_venv() -> Path:
    """``$GAPCHECK_TRITON_VENV``, else ``./.venv-triton``, else the one next to this source checkout."""
    if os.environ.get(VENV_ENV_VAR):
        return Path(os.environ[VENV_ENV_VAR])
    here = Path.cwd() / DEFAULT_VENV_NAME
    if here.exists():
        return here
    return Path(__file__).resolve().parents[2] / DEFAULT_VENV_NAME


def find_distribution(venv: str | Path | None = None) -> TritonDistribution:
    """Locate the tritonserver binary and the stub's interpreter inside ``venv``; raise InputError if missing."""
    venv_path = Path(venv) if venv is not None else default_venv()
    python = venv_path / "bin" / "python"
    if not python.exists():
        raise InputError(
            f"no Triton server environment at {venv_path}",
            hint="run `bash scripts/setup_triton_env.sh` (creates .venv-triton with nvidia-pytriton and onnxruntime)",
        )
    probe = (
        "import json, sys, sysconfig; "
        "print(json.dumps({'version': f'{sys.version_info[0]}.{sys.version_info[1]}', "
        "'libdir': sysconfig.get_config_var('LIBDIR'), 'purelib': sysconfig.get_paths()['purelib']}))"
    )
    out = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    info = json.loads(out.stdout)
    site_packages = Path(info["purelib"])
    dist = TritonDistribution(
        venv=venv_path,
        python_version=info["version"],
        python_libdir=Path(info["libdir"]),
        site_packages=site_packages,
        server_root=site_packages / "pytriton" / "tritonserver",
        libs=site_packages / "nvidia_pytriton.libs",
    )
    for needed in (dist.binary, dist.stub, dist.libs):
        if not needed.exists():
            raise InputError(
                f"{needed} is missing from the Triton environment {venv_path}",
                hint="reinstall it with `bash scripts/setup_triton_env.sh`",
            )
    return dist


RESTRICTABLE_APIS = ("health", "metadata", "inference", "shared-memory", "model-config", "model-repository",
                     "statistics", "trace", "logging")


def restriction_args(apis: tuple[str, ...] | list[str], header: str, value: str) -> tuple[str, ...]:
    """tritonserver flags restricting ``apis`` (HTTP and gRPC) to requests carrying ``header: value``.

    This is how production servers are hardened (NVIDIA's secure-deployment guide; PyTriton does it by
    default). Triton's gRPC frontend expects the header as ``triton-grpc-protocol-<header>``; gapcheck's
    client sends both spellings, so one ``triton-access-token`` header works over both protocols.
    """
    unknown = sorted(set(apis) - set(RESTRICTABLE_APIS))
    if unknown or not apis:
        raise InputError(f"restrictable APIs are {', '.join(RESTRICTABLE_APIS)}; not {', '.join(unknown) or 'none'}")
    if not header or any(c in header + value for c in ",:=\n\r"):
        raise InputError("the restriction header and value may not contain ',', ':', '=' or newlines")
    spec = f"{','.join(apis)}:{header}={value}"
    return (f"--http-restricted-api={spec}", f"--grpc-restricted-protocol={spec}")


# The bundled server has no onnxruntime backend: this Python-backend model runs the same ONNX file with
# ONNX Runtime inside the server (in the stub's interpreter, numpy 1.x and onnxruntime from .venv-triton).
ONNX_RUNNER_PY = '''
import json
import os

import onnxruntime
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        path = os.path.join(args["model_repository"], args["model_version"], "model.onnx")
        self.session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
        self.onnx_inputs = [i.name for i in self.session.get_inputs()]
        self.input_names = [i["name"] for i in config["input"]]
        self.output_names = [o["name"] for o in config["output"]]

    def execute(self, requests):
        responses = []
        for request in requests:
            feeds = {onnx_name: pb_utils.get_input_tensor_by_name(request, served).as_numpy()
                     for served, onnx_name in zip(self.input_names, self.onnx_inputs)}
            results = self.session.run(self.output_names, feeds)
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor(name, value) for name, value in zip(self.output_names, results)]))
        return responses
'''


def python_backend_copy(model_repository: str | Path, target: str | Path) -> Path:
    """Copy ``model_repository`` to ``target`` with every ONNX Runtime model served by :data:`ONNX_RUNNER_PY`.

    What ``gapcheck export`` writes (platform ``onnxruntime_onnx``) cannot load on the bundled server; the copy
    keeps each config (names, dims, max_batch_size, ...) with the platform swapped for the Python backend, so
    the bundled server serves the same ONNX file. Links are copied as links, never followed.
    """
    from google.protobuf import text_format

    from gapcheck.triton.repository import parse_model_config

    source, destination = Path(model_repository), Path(target)
    if not source.is_dir():
        raise InputError(f"model repository {source} is not a directory")
    if destination.exists():
        raise InputError(f"{destination} exists: give a new folder for the copy")
    shutil.copytree(source, destination, symlinks=True)
    for config_path in sorted(destination.glob("*/config.pbtxt")):
        if config_path.is_symlink():
            raise InputError(f"{config_path} is a symbolic link: refusing to rewrite it")
        config = parse_model_config(config_path.read_text(encoding="utf-8"))
        if config.platform != "onnxruntime_onnx" and config.backend != "onnxruntime":
            continue
        config.platform, config.backend = "", "python"
        config_path.write_text(text_format.MessageToString(config), encoding="utf-8")
        for version_dir in config_path.parent.iterdir():
            if version_dir.is_dir() and not version_dir.is_symlink() and version_dir.name.isdigit():
                (version_dir / "model.py").write_text(ONNX_RUNNER_PY, encoding="utf-8")
    return destination


def free_ports(count: int = 3) -> list[int]:
    """Ports free on 127.0.0.1 right now (all sockets held until every port is picked, so they differ)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for sock in sockets:
            sock.close()


class LocalTritonServer:
    """A tritonserver process on 127.0.0.1 serving ``model_repository``; use as a context manager.

    ``explicit=True`` runs with ``--model-control-mode=explicit`` and loads ``load_models``
    (default all) at start, so callers can load/unload (and gapcheck can load a twin) later.
    A model that fails to load does not stop the server (``--exit-on-error=false``) and
    does not make it unready (``--strict-readiness=false``, unless ``strict_readiness``: production's default,
    where one failed model makes the whole server unready): tests plant such models.
    """

    def __init__(
        self,
        model_repository: str | Path,
        *,
        venv: str | Path | None = None,
        ports: ServerPorts | None = None,
        explicit: bool = True,
        load_models: tuple[str, ...] = ("*",),
        extra_args: tuple[str, ...] = (),
        workdir: str | Path | None = None,
        strict_readiness: bool = False,
    ) -> None:
        self.model_repository = Path(model_repository).resolve()
        self.distribution = find_distribution(venv)
        if ports is None:
            http, grpc, metrics = free_ports(3)
            ports = ServerPorts(http=http, grpc=grpc, metrics=metrics)
        self.ports = ports
        self.explicit = explicit
        self.load_models = load_models
        self.extra_args = extra_args
        self.strict_readiness = strict_readiness
        self._own_workdir = workdir is None
        self.workdir = Path(tempfile.mkdtemp(prefix="gapcheck-triton-")) if workdir is None else Path(workdir)
        self.log_path = self.workdir / "tritonserver.log"
        self._process: subprocess.Popen | None = None
        self._log_file: BinaryIO | None = None

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.ports.http}"

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.ports.grpc}"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def url(self, protocol: str) -> str:
        return self.grpc_url if protocol == "grpc" else self.http_url

    def _prepare_backends(self) -> Path:
        # The python backend looks for its stub next to libtriton_python.so; the wheel keeps one stub per
        # Python version elsewhere, so assemble a backend directory with the stub for the venv's interpreter.
        backend_dir = self.workdir / "backends" / "python"
        backend_dir.mkdir(parents=True, exist_ok=True)
        source = self.distribution.server_root / "backends" / "python"
        for name in ("libtriton_python.so", "triton_python_backend_utils.py"):
            shutil.copy2(source / name, backend_dir / name)
        shutil.copy2(self.distribution.stub, backend_dir / "triton_python_backend_stub")
        return backend_dir.parent

    def _environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONHOME", "PYTHONPATH", "VIRTUAL_ENV")}
        dist = self.distribution
        lib_dirs = [str(dist.libs), str(dist.python_libdir)]
        if env.get("LD_LIBRARY_PATH"):
            lib_dirs.append(env["LD_LIBRARY_PATH"])
        env["LD_LIBRARY_PATH"] = ":".join(lib_dirs)
        # The stub's interpreter must see the server venv's packages (numpy 1.x, onnxruntime), never ours.
        env["PYTHONPATH"] = str(dist.site_packages)
        env["PATH"] = f"{dist.venv / 'bin'}:{env.get('PATH', '')}"
        return env

    def command(self, backend_dir: Path) -> list[str]:
        shm_prefix = f"gapcheck_{os.getpid()}_{uuid.uuid4().hex[:8]}"
        args = [
            str(self.distribution.binary),
            f"--model-repository={self.model_repository}",
            f"--backend-directory={backend_dir}",
            f"--cache-directory={self.distribution.server_root / 'caches'}",
            "--http-address=127.0.0.1",
            "--grpc-address=127.0.0.1",
            "--metrics-address=127.0.0.1",
            f"--http-port={self.ports.http}",
            f"--grpc-port={self.ports.grpc}",
            f"--metrics-port={self.ports.metrics}",
            "--exit-on-error=false",
            f"--strict-readiness={str(self.strict_readiness).lower()}",
            "--exit-timeout-secs=5",
            f"--backend-config=python,shm-region-prefix-name={shm_prefix}",
        ]
        if self.explicit:
            args.append("--model-control-mode=explicit")
            args += [f"--load-model={name}" for name in self.load_models]
        return args + list(self.extra_args)

    def start(self, timeout_s: float = 60.0) -> "LocalTritonServer":
        backend_dir = self._prepare_backends()
        self._log_file = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        command = self.command(backend_dir)
        logger.debug("starting %s", " ".join(command))
        self._process = subprocess.Popen(
            command,
            env=self._environment(),
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=self.workdir,
            start_new_session=True,  # its own process group: stop() can reach the stub processes too
        )
        try:
            self.wait_ready(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        url = f"http://{self.http_url}/v2/health/ready"
        while time.monotonic() < deadline:
            if self._process is None or self._process.poll() is not None:
                raise EndpointError(f"tritonserver exited during start-up:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(url, timeout=1.0) as response:  # noqa: S310 - loopback only
                    if response.status == 200:
                        return
            except urllib.error.HTTPError as exc:
                # A server whose health API is restricted answers 403 once it is up (models load before the
                # endpoints open), and that is as ready as it will say.
                if exc.code == 403 and b"restricted" in exc.read(4096):
                    return
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            time.sleep(0.1)
        raise EndpointError(f"tritonserver was not ready after {timeout_s:.0f}s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no server log)"
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout_s: float = 15.0) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            try:
                process.send_signal(signal.SIGTERM)
                process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                logger.warning("tritonserver (pid %d) did not stop in %.0fs; killing it", process.pid, timeout_s)
            finally:
                # The group was created for this server alone (start_new_session), so this reaches only
                # its own stub processes.
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=timeout_s)
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        if self._own_workdir:
            # Keep the log of a failed run reachable for a moment; the rest is a copy of wheel files.
            shutil.rmtree(self.workdir / "backends", ignore_errors=True)

    @contextlib.contextmanager
    def running(self, timeout_s: float = 60.0) -> Iterator["LocalTritonServer"]:
        """Started for the ``with`` block (``timeout_s`` for it to become ready), stopped after it, also on error."""
        self.start(timeout_s)
        try:
            yield self
        finally:
            self.stop()

    def __enter__(self) -> "LocalTritonServer":
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
