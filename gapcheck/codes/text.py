"""Finding codes of the text audit: the same raw strings through the training, validation and serving tokenizers.

Every code names a root cause the audit reproduces (by re-running a stage on a transformed string, or by
comparing the stages' vocabularies, special tokens, truncation and padding), never one it guesses; what no
diagnosis reproduces is ``text_unexplained``.
"""
from gapcheck.codes import define
from gapcheck.findings import Severity

F = "preprocess-audit (text)"

TEXT_NORMALIZATION = define(
    "text_normalization", Severity.GAP, F, "Case or accent normalization differs between stages",
    """The stages tokenize the same string differently, and the difference is reproduced by lowercasing the string
    or stripping its accents (NFD, combining marks removed) before one stage: e.g. the training tokenizer lowercases
    (do_lower_case / an uncased vocabulary) and the serving one does not. The evidence names the transform and the
    first differing token of a sample.""",
    "Load the same tokenizer files with the same do_lower_case / strip_accents settings in every stage, or apply the "
    "same text normalization before tokenizing.")
UNICODE_NORMALIZATION = define(
    "unicode_normalization", Severity.GAP, F, "Unicode normalization (NFC/NFKC/NFD) differs between stages",
    """The difference is reproduced by normalizing the string to NFC, NFKC or NFD before one stage: one pipeline
    normalizes (e.g. NFKC turns full-width letters and ligatures into ASCII) and the other does not.""",
    "Normalize the text the same way (unicodedata.normalize with the same form) before every stage.")
WHITESPACE_CONTROL = define(
    "whitespace_control", Severity.GAP, F, "Whitespace or control-character handling differs",
    """The difference is reproduced by removing control and zero-width characters (ZWSP, ZWJ, BOM, bidi marks) or by
    collapsing and trimming whitespace before one stage: one pipeline cleans the text, the other feeds it raw.""",
    "Clean the text the same way in every stage (the same clean_text setting, the same strip/collapse of whitespace).")
SPECIAL_TOKENS = define(
    "special_tokens", Severity.GAP, F, "Special tokens added, missing or duplicated",
    """Without their special tokens ([CLS], [SEP], <s>, </s>, ...) the two stages' ids are equal: one stage adds
    them and the other does not (add_special_tokens=False, or a template that adds them twice). The evidence lists
    the special tokens each stage put where.""",
    "Add special tokens exactly once, in the same stage of every pipeline (tokenizer(..., add_special_tokens=True) "
    "and no template that adds them again).")
TRUNCATION = define(
    "truncation", Severity.GAP, F, "Truncation length or side differs",
    """One stage's ids are the other's cut at another length (e.g. 512 in training, 128 behind the endpoint) or cut
    from the other side (truncation_side left vs right); the evidence gives both lengths and how many audited samples
    reach each stage's limit.""",
    "Use the same max_length and truncation_side in every stage (the model was trained on one of them).")
PADDING = define(
    "padding", Severity.GAP, F, "Padding side, length or pad id differs",
    """Without padding (positions the attention mask zeroes, or pad ids) the stages' ids are equal, but the padding
    differs: left vs right, another padded length, or another pad token id.""",
    "Pad on the side the model was trained with, with its own pad token id, and pass the attention mask.")
VOCABULARY = define(
    "vocabulary", Severity.GAP, F, "The stages use different vocabularies",
    """The stages' vocabularies (tokens and ids, and the BPE merges where there are any) hash differently, and the
    differing ids map to different strings: another tokenizer version or vocabulary file ships with one stage.
    The evidence gives both hashes, how many entries differ and examples of ids that mean another string.""",
    "Ship the same tokenizer files (vocab.txt / tokenizer.json / merges) with every stage; pin and hash them.")
ADDED_TOKENS_MISSING = define(
    "added_tokens_missing", Severity.GAP, F, "Tokens added in one stage are missing in another",
    """A token added to one stage's tokenizer (tokenizer.add_tokens / added_tokens.json) is not in the other's
    vocabulary, and the audited text contains it: the other stage splits it into pieces or maps it to unknown.""",
    "Save the tokenizer after add_tokens (save_pretrained) and load those files in every stage.")
UNKNOWN_TOKENS = define(
    "unknown_tokens", Severity.GAP, F, "One stage maps more of the text to the unknown token",
    """A stage emits the unknown token ([UNK], <unk>) more often than the reference on the same strings (a
    vocabulary without those characters, or a normalization that keeps characters the vocabulary lacks). The
    evidence gives each stage's unknown-token rate.""",
    "Use the vocabulary the model was trained with, and the same normalization before it.")
FAST_SLOW = define(
    "fast_slow_disagreement", Severity.GAP, F, "The fast and slow tokenizer disagree on the same files",
    """Two stages load the same tokenizer files, one with the Rust (fast, tokenizers) implementation and the other
    with the Python (slow) one, and they give different ids: a known class of bugs (added tokens next to
    whitespace, Unicode tables of different versions, control characters). The first divergence names the
    characters; a transform that reproduces it is reported beside it.""",
    "Use the same implementation in training and serving (prefer the fast tokenizer everywhere), or normalize the "
    "text so both agree on it.")
UNEXPLAINED = define(
    "text_unexplained", Severity.GAP, F, "Stages tokenize differently for no identified reason",
    """The stages' ids differ and none of the diagnoses (normalization, special tokens, truncation, padding,
    vocabulary, added tokens, unknown tokens, fast vs slow) reproduces the difference; the first divergence is
    shown, and no cause is guessed.""",
    "Compare the stages' tokenizer settings (tokenizer_config.json) and the code around them, starting at the first "
    "differing token.")
NONDETERMINISTIC = define(
    "text_nondeterministic", Severity.GAP, F, "A tokenizer stage is nondeterministic",
    """Tokenizing the same string twice with the same stage gives different ids: subword regularization (sentencepiece
    enable_sampling, BPE dropout) left on outside training.""",
    "Turn sampling/dropout off in validation and serving (e.g. sp_model_kwargs={'enable_sampling': False}, "
    "BPE dropout=None).")
STATISTICS_DRIFT = define(
    "token_statistics_drift", Severity.WARNING, F, "Token statistics differ between stages",
    """A two-sample KS test on a per-sample statistic (sequence length, unknown tokens per sample) finds a difference
    with a p-value under the threshold and an effect (KS D) above the minimum, as the data commands judge drift.""",
    "Look at the per-stage statistics table; usually truncation, special tokens or normalization, named elsewhere.")
STAGE_ERROR = define(
    "text_stage_error", Severity.GAP, F, "A tokenizer stage failed on a sample",
    """A stage raised on a string, or returned something that is not token ids (a list of ints, a tensor, or a
    BatchEncoding/dict with input_ids); the stage, the sample and the error are named and the other samples are
    still audited.""",
    "Run the stage on the named sample to reproduce, and fix the stage or exclude the sample.")
BAD_TEXT = define(
    "bad_text", Severity.WARNING, F, "A sample is not usable text",
    """The sample is not valid UTF-8, holds NUL bytes (binary junk), is longer than the character limit, or cannot
    be read (a missing field, a non-string cell); it is skipped, counted and listed, never fed to a stage.""",
    "Fix or drop the sample; raise the length limit (max_chars) only for trusted data.")
GOLDEN_TOKENIZER_CHANGED = define(
    "golden_tokenizer_changed", Severity.GAP, F, "Today's tokenizer no longer gives a golden bundle's ids",
    """A golden bundle recorded with --text-samples/--tokenizer holds token ids, so replaying it (nightly) checks the
    model behind the endpoint, not the tokenizer in front of it. Re-tokenizing the same strings with the tokenizer
    the service uses today gives other ids for some samples, while the tokenizer recorded in the bundle still gives
    the bundle's ids: the serving tokenizer changed since the release. The evidence names the samples and the root
    cause the text audit reproduces between the recorded and today's tokenizer (lowercasing, truncation, padding,
    special tokens, vocabulary, ...), or says that none does.""",
    "Serve the tokenizer files and settings the model was released with, or record a new golden bundle after "
    "checking the new tokenizer with preprocess-audit.")
GOLDEN_TEXT_UNREPRODUCED = define(
    "golden_text_unreproduced", Severity.WARNING, F, "A golden bundle's token ids could not be reproduced",
    """Today's tokenizer gives other ids than the bundle holds, and the tokenizer recorded in the bundle cannot tell
    why: it gives other ids too (the strings in the text file, or the recorded tokenizer's files, changed since
    recording) or it cannot be loaded here. Which of the two changed is not guessed.""",
    "Point the check at the text file the bundle was recorded from (the manifest names it) and the recorded "
    "tokenizer's files, or record a new bundle.")
