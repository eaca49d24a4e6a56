"""Finding codes of the text audit: the same raw strings through the training, validation and serving tokenizers.

Every code names a root cause the audit reproduces (by re-running a stage on a transformed string, or by
comparing the stages' vocabularies, special tokens, truncation and padding), never one it guesses; what no
diagnosis reproduces is ``text_unexplained``.

The texts (severity, title, explanation, fix) are in ``text.toml`` beside this module; adding a code is
one entry there plus one constant line here.
"""
from gapcheck.codes import catalog

_codes = catalog(__name__)

TEXT_NORMALIZATION = _codes["text_normalization"]
UNICODE_NORMALIZATION = _codes["unicode_normalization"]
WHITESPACE_CONTROL = _codes["whitespace_control"]
SPECIAL_TOKENS = _codes["special_tokens"]
TRUNCATION = _codes["truncation"]
PADDING = _codes["padding"]
VOCABULARY = _codes["vocabulary"]
ADDED_TOKENS_MISSING = _codes["added_tokens_missing"]
UNKNOWN_TOKENS = _codes["unknown_tokens"]
FAST_SLOW = _codes["fast_slow_disagreement"]
UNEXPLAINED = _codes["text_unexplained"]
NONDETERMINISTIC = _codes["text_nondeterministic"]
STATISTICS_DRIFT = _codes["token_statistics_drift"]
STAGE_ERROR = _codes["text_stage_error"]
BAD_TEXT = _codes["bad_text"]
GOLDEN_TOKENIZER_CHANGED = _codes["golden_tokenizer_changed"]
GOLDEN_TEXT_UNREPRODUCED = _codes["golden_text_unreproduced"]
