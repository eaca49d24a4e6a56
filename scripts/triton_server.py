#!/usr/bin/env python
"""Start or stop a local Triton server on 127.0.0.1 (the binary bundled by nvidia-pytriton in .venv-triton).

    python scripts/triton_server.py run   --model-repository DIR [--http-port 8000 --grpc-port 8001]
    python scripts/triton_server.py start --model-repository DIR --state .triton-server.json
    python scripts/triton_server.py stop  --state .triton-server.json

``run`` serves in the foreground until Ctrl-C; ``start`` returns once the server is ready and records
its pid, ports and log in the state file, which ``stop`` reads. Models run with --model-control-mode=explicit
(all loaded at start), so gapcheck can load its twin models for server-side intermediates.
Note: the bundled server has Triton's Python backend only (no onnxruntime backend).

Hardened, as production servers are: ``--restrict model-repository,model-config`` restricts those APIs
(HTTP and gRPC) to requests carrying ``triton-access-token``, whose value is read from the environment
variable named by ``--token-env`` (default TRITON_ACCESS_TOKEN) and never printed. Clients then pass
``--triton-header triton-access-token:$TRITON_ACCESS_TOKEN``.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gapcheck.triton.local_server import LocalTritonServer, ServerPorts, free_ports, restriction_args  # noqa: E402


def _ports(args: argparse.Namespace) -> ServerPorts:
    spare = iter(free_ports(3))
    return ServerPorts(http=args.http_port or next(spare), grpc=args.grpc_port or next(spare),
                       metrics=args.metrics_port or next(spare))


def _server(args: argparse.Namespace) -> LocalTritonServer:
    extra: tuple[str, ...] = ()
    if args.restrict:
        token = os.environ.get(args.token_env, "")
        if not token:
            raise SystemExit(f"error: --restrict needs the token in ${args.token_env}")
        extra = restriction_args(tuple(args.restrict.split(",")), "triton-access-token", token)
    return LocalTritonServer(args.model_repository, venv=args.venv, ports=_ports(args),
                             explicit=not args.poll, workdir=args.workdir, extra_args=extra)


def run(args: argparse.Namespace) -> int:
    server = _server(args).start(timeout_s=args.timeout)
    print(f"Triton ready: HTTP {server.http_url}  gRPC {server.grpc_url}  (log: {server.log_path}); Ctrl-C stops it")
    try:
        signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
        while True:
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


def start(args: argparse.Namespace) -> int:
    state = Path(args.state)
    if state.exists():
        print(f"error: {state} exists; stop that server first", file=sys.stderr)
        return 2
    server = _server(args)
    server.start(timeout_s=args.timeout)
    # Detach: this process exits, the server (its own session) keeps running until `stop`.
    state.write_text(json.dumps({"pid": server.pid, "http": server.http_url, "grpc": server.grpc_url,
                                 "log": str(server.log_path), "workdir": str(server.workdir)}, indent=2))
    print(f"Triton ready: HTTP {server.http_url}  gRPC {server.grpc_url}  pid {server.pid}  (state: {state})")
    os._exit(0)  # skip the server object's cleanup: the process must outlive us


def stop(args: argparse.Namespace) -> int:
    state = Path(args.state)
    if not state.exists():
        print(f"error: no state file {state}", file=sys.stderr)
        return 2
    recorded = json.loads(state.read_text())
    pid = int(recorded["pid"])
    try:
        os.kill(pid, signal.SIGTERM)
        for _ in range(150):
            os.kill(pid, 0)
            time.sleep(0.1)
        os.killpg(pid, signal.SIGKILL)  # its own process group (start_new_session): the server and its stubs
    except ProcessLookupError:
        pass
    state.unlink()
    shutil.rmtree(recorded.get("workdir") or "/nonexistent", ignore_errors=True)  # copied backend files and log
    print(f"stopped Triton (pid {pid})")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="action", required=True)
    for name in ("run", "start"):
        p = sub.add_parser(name)
        p.add_argument("--model-repository", required=True)
        p.add_argument("--venv", default=None, help="server venv (default: $GAPCHECK_TRITON_VENV or .venv-triton)")
        p.add_argument("--http-port", type=int, default=0)
        p.add_argument("--grpc-port", type=int, default=0)
        p.add_argument("--metrics-port", type=int, default=0)
        p.add_argument("--poll", action="store_true", help="no explicit model control (twins then cannot load)")
        p.add_argument("--workdir", default=None)
        p.add_argument("--timeout", type=float, default=120.0)
        p.add_argument("--restrict", default="", help="APIs to restrict, e.g. model-repository,model-config")
        p.add_argument("--token-env", default="TRITON_ACCESS_TOKEN", help="environment variable holding the token")
        if name == "start":
            p.add_argument("--state", default=".triton-server.json")
    p = sub.add_parser("stop")
    p.add_argument("--state", default=".triton-server.json")
    args = parser.parse_args(argv)
    return {"run": run, "start": start, "stop": stop}[args.action](args)


if __name__ == "__main__":
    sys.exit(main())
