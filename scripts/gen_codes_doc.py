"""Write docs/codes.md from the finding-code registry (``--check``: exit 1 when the file is stale).

    python scripts/gen_codes_doc.py           # regenerate
    python scripts/gen_codes_doc.py --check   # CI / tests: is docs/codes.md up to date?

The texts come from the family data files, ``gapcheck/codes/<family>.toml``: edit those, never docs/codes.md.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gapcheck.codes import markdown  # noqa: E402 - after the path tweak, for running from a checkout

TARGET = ROOT / "docs" / "codes.md"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail when docs/codes.md differs from the registry")
    args = parser.parse_args()
    text = markdown()
    if args.check:
        current = TARGET.read_text(encoding="utf-8") if TARGET.exists() else ""
        if current != text:
            print(f"{TARGET.relative_to(ROOT)} is stale: run python scripts/gen_codes_doc.py", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(text, encoding="utf-8")
    print(f"wrote {TARGET.relative_to(ROOT)} ({text.count('### ')} codes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
