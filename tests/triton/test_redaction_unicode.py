"""Redaction reads the text as a reader sees it (attacker D2): a secret split by invisible characters (U+200B,
U+00AD, U+2060, U+FEFF, combining marks, control characters) or written in NFKC-equivalent letters (fullwidth) is
found, and the ORIGINAL characters it covers are replaced. And what a server may echo of an Authorization header
(attacker D2b): Basic's decoded ``user:password`` and password, Bearer's token alone."""
from __future__ import annotations

import base64
import json
import unicodedata
from typing import Any

import numpy as np
import pytest

from gapcheck.errors import EndpointError
from gapcheck.triton.client import TritonEndpoint, connect
from gapcheck.triton.url import redact, secrets_in
from tests.triton.hostile_kserve import kserve

SECRET = "S3CRETPLANTED9f8e7d"
BEARER = secrets_in("", {"Authorization": f"Bearer {SECRET}"})


def _split(by: str) -> str:
    return by.join(SECRET[i:i + 4] for i in range(0, len(SECRET), 4))


def _fullwidth(text: str) -> str:
    return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in text)


def _as_read(text: str) -> str:
    """What a reader sees: invisible characters gone, NFKC applied."""
    shown = "".join(c for c in text if unicodedata.category(c) not in ("Cf", "Mn", "Me", "Cc"))
    return unicodedata.normalize("NFKC", shown)


HIDDEN = {
    "zero width space": _split("\u200b"),
    "soft hyphen": _split("\u00ad"),
    "word joiner": _split("\u2060"),
    "byte order mark": _split("\ufeff"),
    "right-to-left mark": _split("\u200f"),
    "combining marks": "\u0336".join(SECRET),
    "control characters": _split("\x01"),
    "C1 controls": _split("\x9b"),
    "fullwidth": _fullwidth(SECRET),
    "fullwidth split": _split("\u200b").translate({ord(c): ord(c) + 0xFEE0 for c in "S3CR"}),
}


@pytest.mark.parametrize("fragments", [False, True])
@pytest.mark.parametrize("name", list(HIDDEN))
def test_a_disguised_secret_is_replaced_in_the_original_text(name: str, fragments: bool) -> None:
    text = f"bad request: token={HIDDEN[name]}; see the docs\u200b."
    out = redact(text, BEARER, fragments=fragments)
    assert SECRET not in _as_read(out)
    # only the secret's own characters went: what stood around it is there as it was (invisible ones included)
    prefix = "bad request: token=" if not fragments else "bad request: "
    assert out.startswith(prefix) and out.endswith("; see the docs\u200b.")


def test_fragments_of_a_disguised_secret_are_replaced() -> None:
    text = f"cut short: {_split(chr(0xAD))[:14]} lowered: {_fullwidth(SECRET.lower())[:12]} fine: café"
    out = redact(text, BEARER, fragments=True)
    assert out == "cut short: *** lowered: *** fine: café"


def test_text_without_a_secret_is_left_as_it_was() -> None:
    text = "ｆｕｌｌ ｗｉｄｔｈ caf\u00e9 e\u0301 \u200b\x1b[31m tab\there ﬁ"
    assert redact(text, BEARER, fragments=True) == text


def test_adjacent_and_overlapping_matches_become_one_replacement() -> None:
    assert redact(f"[{_fullwidth(SECRET)}\u200b{_fullwidth(SECRET)}]", BEARER) == "[***\u200b***]"
    assert redact(f"[{_fullwidth(SECRET)}{_fullwidth(SECRET)}]", BEARER) == "[***]"
    assert redact(f"[{_fullwidth(SECRET)[:12]}]", (SECRET, SECRET[8:]), fragments=True) == "[***]"


def test_basic_credentials_yield_the_decoded_pair_and_the_password() -> None:
    token = base64.b64encode(b"alice:Pw9Xq2").decode()
    found = secrets_in("", {"Authorization": f"Basic {token}"})
    assert {token, "alice:Pw9Xq2", "Pw9Xq2"} <= set(found) and "alice" not in found
    assert redact("user alice sent alice:Pw9Xq2 (Pw9Xq2)", found, fragments=True) == "user alice sent *** (***)"


def test_basic_that_does_not_decode_yields_the_token_alone() -> None:
    found = secrets_in("", {"Authorization": "Basic not*base64"})
    assert "not*base64" in found and all(":" not in f for f in found if f != "Basic not*base64")


def test_a_short_bearer_token_is_a_secret_alone() -> None:
    assert "tk-41x" in secrets_in("", {"Authorization": "Bearer tk-41x"})


def _rejected(message: str, headers: dict[str, str]) -> str:
    def respond(method: str, path: str, body: bytes) -> tuple[Any, ...]:
        return 400, {"error": message}

    with kserve(respond) as url, connect(TritonEndpoint(url, headers=headers, retries=0)) as conn, \
            pytest.raises(EndpointError) as caught:
        conn.infer("m", {"x": np.zeros((1, 3), np.float32)}, ["y"])
    return str(caught.value)


def test_an_endpoints_error_text_hides_a_disguised_token() -> None:
    said = _rejected(" ".join(f"{k}={v}" for k, v in HIDDEN.items()), {"Authorization": f"Bearer {SECRET}"})
    assert "[400]" in said and "zero width space=***" in said
    assert SECRET not in _as_read(said) and SECRET not in _as_read(json.dumps(said))


def test_an_endpoints_error_text_hides_decoded_basic_credentials() -> None:
    token = base64.b64encode(b"alice:Pw9Xq2").decode()
    said = _rejected(f"bad auth=Basic {token} decoded=alice:Pw9Xq2 password Pw9Xq2",
                     {"Authorization": f"Basic {token}"})
    assert "Pw9Xq2" not in said and token not in said and "decoded=*** password ***" in said


def test_words_of_a_plain_header_value_are_not_credentials_alone() -> None:
    found = secrets_in("", {"X-Team": "vision lab"})
    assert "X-Team" not in found and "lab" not in found and "vision" not in found
