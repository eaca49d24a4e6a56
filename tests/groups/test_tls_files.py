"""TLS files are parsed before any connection (issue 18 review D6): a file that is not what it claims to be is a
usage error naming it, never gRPC's own log line and an endpoint failure after the work started."""
from __future__ import annotations

from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from gapcheck.errors import UsageError
from gapcheck.groups.triton import TritonTarget
from tests.triton.test_tls import make_certificates


@pytest.fixture(scope="module")
def pem(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("pem")
    paths = make_certificates(folder)
    key = ec.generate_private_key(ec.SECP256R1())
    paths["encrypted"] = folder / "encrypted.key"
    paths["encrypted"].write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                     serialization.BestAvailableEncryption(b"secret")))
    paths["garbage"] = folder / "garbage.pem"
    paths["garbage"].write_bytes(b"-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n")
    paths["huge"] = folder / "huge.pem"
    paths["huge"].write_bytes(b"A" * (2 << 20))
    return paths


def target(**files: Path) -> TritonTarget:
    return TritonTarget(url="grpcs://127.0.0.1:1", **files)


def test_real_files_pass(pem: dict[str, Path]) -> None:
    target(ssl_root_cert=pem["ca"]).check()
    target(ssl_root_cert=pem["ca"], ssl_cert_chain=pem["cert"], ssl_private_key=pem["key"]).check()


@pytest.mark.parametrize("files, words", [
    ({"ssl_root_cert": "garbage"}, "is not a PEM CA certificate"),
    ({"ssl_root_cert": "key"}, "is not a PEM CA certificate"),
    ({"ssl_root_cert": "huge"}, "over 1 MiB"),
    ({"ssl_cert_chain": "cert", "ssl_private_key": "encrypted"}, "encrypted"),
    ({"ssl_cert_chain": "cert", "ssl_private_key": "garbage"}, "not a PEM certificate chain"),
    ({"ssl_cert_chain": "ca", "ssl_private_key": "key"}, "not a PEM certificate chain"),  # key of another cert
    ({"ssl_private_key": "key"}, "needs --triton-ssl-cert-chain"),
])
def test_wrong_files_are_usage_errors_naming_them(pem: dict[str, Path], files: dict[str, str], words: str) -> None:
    with pytest.raises(UsageError, match=words) as caught:
        target(**{name: pem[which] for name, which in files.items()}).check()
    assert "secret" not in str(caught.value)
