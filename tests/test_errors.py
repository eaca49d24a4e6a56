"""gapcheck.errors.one_line: the one exception condenser every message uses (loading, inputs, exporters, guards)."""
from __future__ import annotations

from gapcheck.errors import condense_error, one_line


def test_first_meaningful_line_and_first_sentence_of_a_long_line():
    assert one_line(ValueError("\n  first  \nsecond")) == "ValueError: first"
    advice = "the fact. " + "advice " * 40
    assert one_line(RuntimeError(advice)) == "RuntimeError: the fact"
    assert one_line(KeyError()) == "KeyError"


def test_limit_cuts_with_an_ellipsis_and_colours_are_removed():
    text = one_line(RuntimeError("\x1b[31m" + "y" * 500 + "\x1b[0m"), limit=50)
    assert text == "RuntimeError: " + "y" * 47 + "..."


def test_a_dataloader_worker_error_is_summarised_by_its_original_message():
    wrapped = ValueError("Caught ValueError in DataLoader worker process 0.\nOriginal Traceback (most recent call last):\n"
                         '  File "x.py", line 3, in __getitem__\n    raise ValueError("bad sample 7")\nValueError: bad sample 7')
    assert one_line(wrapped) == "ValueError: bad sample 7"


def test_condense_error_keeps_every_line_and_the_dynamo_exception_summary():
    assert condense_error(RuntimeError("a\nb\n  c")) == "RuntimeError: a b c"
    report = "Failed to export.\n\n## Exception summary\n\n<class 'X'>: the\nfact\n\n## Other\nnoise"
    assert condense_error(RuntimeError(report)) == "RuntimeError: <class 'X'>: the fact"
    assert len(condense_error(RuntimeError("z" * 1000), 100)) == len("RuntimeError: ") + 100
