"""`gapcheck triton-audit`: parse, call :func:`gapcheck.triton.audit.audit_deployment`, render, exit 0/1."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from gapcheck.cli.choices import Protocol
from gapcheck.cli.triton_options import triton_endpoint
from gapcheck.errors import ExitCode
from gapcheck.findings import Severity
from gapcheck.report.console import make_console, print_findings, print_verdict
from gapcheck.report.json_report import write_json
from gapcheck.report.junit import JUnitCase, write_junit
from gapcheck.triton.audit import TritonAuditResult, audit_deployment
from gapcheck.triton.client import DEFAULT_RETRIES, DEFAULT_TIMEOUT_S


def junit_cases(result: TritonAuditResult) -> list[JUnitCase]:
    classname = f"triton-audit.{result.model}"
    cases = [
        JUnitCase(name=f"{f.code} {f.where}", classname=classname,
                  failure=f.message if f.is_gap else None, details=f"{f.message}\n{f.evidence}")
        for f in result.findings
    ]
    if not any(f.is_gap for f in result.findings):
        cases.append(JUnitCase(name="deployment matches the ONNX graph", classname=classname,
                               details=f"{result.model} @ {result.endpoint}"))
    return cases


def render(result: TritonAuditResult) -> None:
    console = make_console()
    served = result.served
    console.print(f"[bold]Triton audit[/bold] {escape(result.model)} @ {escape(result.endpoint)} ({result.protocol}), "
                  f"server {escape(result.server_name)} {escape(result.server_version)}")
    if served is not None:
        console.print(f"  served version {escape(served.version)} (ready: {escape(', '.join(served.versions) or '-')}), "
                      f"platform {escape(served.platform or '-')}, backend {escape(served.backend or '-')}, "
                      f"max_batch_size {served.max_batch_size}")
    else:
        console.print(f"  model state {escape(result.model_state)}")
    print_findings(console, result.findings)
    gaps = sum(1 for f in result.findings if f.severity is Severity.GAP)
    warnings = sum(1 for f in result.findings if f.severity is Severity.WARNING)
    summary = (f"{gaps} deployment gap(s), {warnings} warning(s)" if gaps
               else f"deployment matches the ONNX graph ({warnings} warning(s))")
    print_verdict(console, result.verdict, summary)


def command(
    triton_url: str = typer.Option(..., "--triton-url", help="Server address host:port (HTTP or gRPC port)."),
    triton_model: str = typer.Option(..., "--triton-model", help="Model name on the server."),
    onnx_file: Path = typer.Option(..., "--onnx", help="The ONNX model the deployment should serve."),
    protocol: Protocol = typer.Option(Protocol.grpc, "--protocol", help="Triton protocol."),
    triton_version: Optional[str] = typer.Option(None, "--triton-version", help="Model version expected on the server."),
    header: list[str] = typer.Option([], "--header", "--triton-header",
                                     help="Extra request header KEY:VALUE (e.g. auth; never printed). Repeatable."),
    ssl: bool = typer.Option(False, "--ssl", "--triton-ssl", help="Use TLS."),
    ssl_root_cert: Optional[Path] = typer.Option(None, "--ssl-root-cert", help="CA certificate (PEM)."),
    ssl_private_key: Optional[Path] = typer.Option(None, "--ssl-private-key", help="Client private key (PEM, gRPC)."),
    ssl_cert_chain: Optional[Path] = typer.Option(None, "--ssl-cert-chain", help="Client certificate chain (PEM, gRPC)."),
    ssl_insecure: bool = typer.Option(False, "--ssl-insecure", help="Skip certificate verification (HTTP)."),
    timeout: float = typer.Option(DEFAULT_TIMEOUT_S, "--timeout", min=0.1, help="Seconds per request."),
    retries: int = typer.Option(DEFAULT_RETRIES, "--retries", min=0,
                                help="Retries of a transient failure (with backoff)."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Write the JSON report here."),
    junit_path: Optional[Path] = typer.Option(None, "--junit", help="Write a JUnit XML report here."),
) -> None:
    """Diff a Triton deployment's config and metadata against the ONNX graph (names, dtypes, dims, batch, versions)."""
    endpoint = triton_endpoint(
        triton_url, protocol=protocol, headers=header, header_flag="--header", ssl=ssl, root_cert=ssl_root_cert,
        private_key=ssl_private_key, cert_chain=ssl_cert_chain, insecure=ssl_insecure, timeout_s=timeout,
        retries=retries,
    )
    result = audit_deployment(endpoint, triton_model, onnx_model=onnx_file, version=triton_version)
    render(result)
    if json_path is not None:
        write_json(json_path, "triton-audit", {"verdict": result.verdict, "result": result})
    if junit_path is not None:
        write_junit(junit_path, "gapcheck triton-audit", junit_cases(result))
    raise typer.Exit(ExitCode.NO_GAP if result.verdict == "pass" else ExitCode.GAP_FOUND)
