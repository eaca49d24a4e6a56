"""`gapcheck triton-audit`: parse, call :func:`gapcheck.triton.audit.audit_deployment`, render, exit 0/1."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gapcheck.cli.options import ConfigOpt, HtmlOpt, JsonOpt, JunitOpt, emit_reports, prepare_reports
from gapcheck.cli.triton_options import (
    DEFAULT_RETRIES,
    DEFAULT_TIMEOUT_S,
    LegacyCertChainOpt,
    LegacyHeaderOpt,
    LegacyInsecureOpt,
    LegacyPrivateKeyOpt,
    LegacyRetriesOpt,
    LegacyRootCertOpt,
    LegacySslOpt,
    LegacyTimeoutOpt,
    ProtocolOpt,
    TritonCertChainOpt,
    TritonHeaderOpt,
    TritonInsecureOpt,
    TritonModelOpt,
    TritonOptions,
    TritonPrivateKeyOpt,
    TritonRetriesOpt,
    TritonRootCertOpt,
    TritonSslOpt,
    TritonTimeoutOpt,
    TritonUrlOpt,
    TritonVersionOpt,
    from_config,
    triton_errors,
    with_legacy,
)
from gapcheck.errors import ExitCode

OnnxOpt = Annotated[Path, typer.Option("--onnx", help="The ONNX model the deployment should serve.")]


def command(
    ctx: typer.Context,
    onnx_file: OnnxOpt,
    triton_url: TritonUrlOpt = None,
    triton_model: TritonModelOpt = None,
    protocol: ProtocolOpt = None,
    triton_version: TritonVersionOpt = None,
    triton_header: TritonHeaderOpt = [],  # noqa: B006 - typer reads the default; it is never mutated
    triton_ssl: TritonSslOpt = False,
    triton_ssl_root_cert: TritonRootCertOpt = None,
    triton_ssl_private_key: TritonPrivateKeyOpt = None,
    triton_ssl_cert_chain: TritonCertChainOpt = None,
    triton_ssl_insecure: TritonInsecureOpt = False,
    triton_timeout: TritonTimeoutOpt = DEFAULT_TIMEOUT_S,
    triton_retries: TritonRetriesOpt = DEFAULT_RETRIES,
    json_path: JsonOpt = None,
    junit_path: JunitOpt = None,
    html_path: HtmlOpt = None,
    config: ConfigOpt = None,
    header: LegacyHeaderOpt = [],  # noqa: B006
    ssl: LegacySslOpt = False,
    ssl_root_cert: LegacyRootCertOpt = None,
    ssl_private_key: LegacyPrivateKeyOpt = None,
    ssl_cert_chain: LegacyCertChainOpt = None,
    ssl_insecure: LegacyInsecureOpt = False,
    timeout: LegacyTimeoutOpt = None,
    retries: LegacyRetriesOpt = None,
) -> None:
    """Diff a Triton deployment's config and metadata against the ONNX graph (names, dtypes, dims, batch, versions)."""
    from gapcheck.report.console import make_console
    from gapcheck.report.formats.console_format import print_result
    from gapcheck.triton.audit import audit_deployment

    reports = prepare_reports(json=json_path, junit=junit_path, html=html_path)
    values = from_config(ctx, config, {
        "triton_url": triton_url, "triton_model": triton_model, "protocol": protocol, "triton_version": triton_version,
        "triton_timeout": triton_timeout, "triton_retries": triton_retries, "triton_ssl": triton_ssl,
        "triton_ssl_root_cert": triton_ssl_root_cert, "triton_ssl_private_key": triton_ssl_private_key,
        "triton_ssl_cert_chain": triton_ssl_cert_chain, "triton_ssl_insecure": triton_ssl_insecure})
    values = with_legacy(ctx, values, {
        "triton_timeout": timeout, "triton_retries": retries, "triton_ssl": ssl or None,
        "triton_ssl_root_cert": ssl_root_cert, "triton_ssl_private_key": ssl_private_key,
        "triton_ssl_cert_chain": ssl_cert_chain, "triton_ssl_insecure": ssl_insecure or None})
    options = TritonOptions.from_values(values, headers=[*triton_header, *header])
    with triton_errors():
        endpoint, model, version = options.target()
        result = audit_deployment(endpoint, model, onnx_model=onnx_file, version=version)
    print_result(make_console(), result)
    emit_reports(result, reports)
    raise typer.Exit(ExitCode.for_verdict(result.verdict))
