"""Golden bundles: the released checkpoint's answers to fixed inputs, recorded once and verified on every load.

``record_bundle`` writes one (see :mod:`gapcheck.golden.record`), ``load_bundle`` verifies and loads one
(see :mod:`gapcheck.golden.bundle`), ``verify_bundle`` returns the report-contract result of
``gapcheck golden verify``.
"""
from gapcheck.golden.bundle import GoldenBundle, load_bundle
from gapcheck.golden.record import RecordRequest, record_bundle
from gapcheck.golden.result import GoldenResult, recorded_result, verify_bundle

__all__ = ["GoldenBundle", "GoldenResult", "RecordRequest", "load_bundle", "record_bundle", "recorded_result",
           "verify_bundle"]
