"""A server that quotes the credential it was sent (issue 23 follow-up, attacker review D2): "invalid token X" echoes
the token without its scheme, cut short, lower-cased, or split by an escape it printed. None of it may reach a
report: the credential's words and any 8 characters in a row of it are redacted, before and after the control
characters go. URLs keep their host readable (fragments only for credentials)."""
from __future__ import annotations

from gapcheck.triton.url import REDACTED, clean_text, redact, secrets_in

TOKEN = "SECRETTOKEN123456789"
SECRETS = secrets_in("", {"authorization": f"Bearer {TOKEN}"})


def _shown(text: str) -> str:
    return redact(clean_text(redact(text, SECRETS, fragments=True)), SECRETS, fragments=True)


def test_the_bare_credential_and_its_fragments_are_redacted() -> None:
    for echoed in (f"invalid token {TOKEN}", f"bad {TOKEN.lower()} x", f"prefix {TOKEN[:12]} only",
                   f"SEC\x1b[0m{TOKEN[3:]}", f"token={TOKEN}&x=1"):
        shown = _shown(echoed)
        assert REDACTED in shown, echoed
        for i in range(len(TOKEN) - 7):
            assert TOKEN[i:i + 8].lower() not in shown.lower(), (echoed, shown)


def test_ordinary_words_and_the_scheme_stay() -> None:
    assert _shown("model resnet50_v2 input Bearer refused") == "model resnet50_v2 input Bearer refused"


def test_a_url_secret_keeps_its_host_without_fragments() -> None:
    url = "https://hooks.example.com/services/T000/B000/XXXXXXXXXXXX"
    assert redact(f"refused: {url}", ("/services/T000/B000/XXXXXXXXXXXX",)) == "refused: https://hooks.example.com***"
