"""Write docs/metrics.md's metric table from the contract (rirlab.contract.METRICS, the one source of the metric
list): ``python scripts/metrics_doc.py`` after a metric is added or reworded there; ``--check`` exits 1 when the
page differs (tests/train/test_contract.py checks the same). Only the lines between the page's two markers change."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rirlab.contract import metrics_table  # noqa: E402

PAGE = REPO / "docs" / "metrics.md"
BEGIN = "<!-- metric table: generated from rirlab/contract.py (METRICS) by scripts/metrics_doc.py; edit it there -->"
END = "<!-- end of the generated metric table -->"


def with_table(text: str) -> str:
    """The page ``text`` with the lines between its markers replaced by the contract's table."""
    head, begin, rest = text.partition(BEGIN + "\n")
    _, end, tail = rest.partition(END)
    if not begin or not end:
        raise SystemExit(f"{PAGE}: the markers of the generated metric table are missing; put back\n{BEGIN}\n{END}")
    return head + begin + metrics_table() + end + tail


def main(argv: list[str]) -> int:
    text = PAGE.read_text(encoding="utf-8")
    new = with_table(text)
    if "--check" in argv:
        if new != text:
            print(f"{PAGE} differs from rirlab.contract.METRICS; run: python scripts/metrics_doc.py", file=sys.stderr)
            return 1
        return 0
    if new != text:
        PAGE.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
