"""Why an endpoint could not be checked: one line, through gapcheck.errors.one_line (the one condenser)."""
from __future__ import annotations

from gapcheck.errors import EndpointError, one_line
from gapcheck.nightly.probe import _unreachable_message


def test_our_errors_keep_their_wording_and_hint_without_their_type():
    exc = EndpointError("Triton endpoint grpc://h:1: server_live failed\nsecond line", hint="send 'triton-access-token'")
    assert _unreachable_message(exc) == "Triton endpoint grpc://h:1: server_live failed (send 'triton-access-token')"
    assert _unreachable_message(EndpointError("", hint="h")) == "EndpointError (h)"


def test_other_errors_are_named_by_type_on_one_cut_line_without_colour_codes():
    exc = ConnectionResetError("\x1b[31mreset\x1b[0m by peer " + "x" * 1000 + "\nPASS all good")
    message = _unreachable_message(exc)
    assert message == one_line(exc) and message.startswith("ConnectionResetError: reset by peer")
    assert "\n" not in message and "\x1b" not in message and len(message) < 400
    assert _unreachable_message(TimeoutError()) == "TimeoutError"
