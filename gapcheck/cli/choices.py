"""Enums for CLI choices shared by several commands (tests check each member is handled by the library)."""
from __future__ import annotations

from enum import Enum


class Exporter(str, Enum):
    dynamo = "dynamo"
    torchscript = "torchscript"


class Precision(str, Enum):
    fp32 = "fp32"
    fp16 = "fp16"
    bf16 = "bf16"


class Protocol(str, Enum):
    grpc = "grpc"
    http = "http"
