"""One level through project helpers (GC101/GC103): what a helper fits is followed into its caller, and modules that
cannot hold a fitting helper are never parsed for it."""
from __future__ import annotations

import ast
from pathlib import Path

from gapcheck.lint import Selection, lint_paths
from gapcheck.lint.source import read_source
from gapcheck.lint.symbols import Program


def test_an_imported_module_is_read_for_the_word_fit_before_it_is_parsed(tmp_path: Path) -> None:
    (tmp_path / "prep.py").write_text("from sklearn.preprocessing import StandardScaler\n\n"
                                      "def scaled(X):\n    return StandardScaler().fit_transform(X)\n")
    (tmp_path / "shapes.py").write_text("def flat(X):\n    return X.reshape(len(X), -1)\n")
    main = tmp_path / "main.py"
    main.write_text("import numpy as np\nfrom prep import scaled\nfrom shapes import flat\n"
                    "X = flat(np.load('x.npy'))\nY = scaled(X)\nhead, tail = Y[:800], Y[800:]\nlocal = len(X)\n")
    program = Program([tmp_path])
    module = program.add(read_source(main, str(main)))
    calls = {ast.unparse(c.func): c for c in module.calls}
    words = ("fit",)
    assert program.imported_mentions(module, calls["scaled"], words)
    assert not program.imported_mentions(module, calls["flat"], words)
    assert program.imported_mentions(module, calls["len"], words)  # not an import: resolving it parses nothing
    assert not program.imported_mentions(module, calls["np.load"], words)  # an installed library: never followed
    result = lint_paths([main], Selection(select=("GC101",)), jobs=1)
    assert [(f.subject.line, f.code) for f in result.findings] == [(5, "GC101")]  # a module that splits by slicing
    assert result.findings[0].message.startswith("scaled() fits a transformer on the data it returns (")
