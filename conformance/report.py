"""Print a conformance report (``--hfexport-report`` JSON) as the matrix and the counts per check and backend.

    python -m conformance.report out/conformance.json [--markdown]

``--markdown`` prints the section docs/conformance.md keeps per implementation: date,
versions, the command, the counts table and the per-model matrix.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from pytest_hfexport.report import SYMBOL, count_table, merge_statuses

REGENERATE = ("python -m pytest -n 2 --dist loadgroup conformance --hfexport-impl={impl} --hfexport-backend=all "
              "--hfexport-report out/conformance-{impl}.json")


def model_matrix(rows: list[dict[str, Any]], markdown: bool) -> list[str]:
    """One line per model x check, one column per backend (worst status of the rows for that cell)."""
    cells = {(model, check, backend): status for (model, backend, check), status in merge_statuses(rows).items()}
    backends = sorted({k[2] for k in cells})
    lines = sorted({(k[0], k[1]) for k in cells})
    table = [[m, c, *(SYMBOL.get(cells.get((m, c, b), ""), "") for b in backends)] for m, c in lines]
    head = ["model", "check", *backends]
    if markdown:
        return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in table]
    widths = [max(len(r[i]) for r in [head, *table]) for i in range(len(head))]
    return ["  ".join(f"{v:<{w}}" for v, w in zip(r, widths)).rstrip() for r in [head, *table]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("report", type=Path)
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args(argv)
    data = json.loads(args.report.read_text())
    rows = data.get("rows", [])
    impl = data.get("implementation", "?")
    if args.markdown:
        versions = ", ".join(f"{k} {v}" for k, v in sorted(data.get("versions", {}).items()) if v)
        print(f"### {impl}\n\nMeasured {data.get('created', '?')}; {versions}.\n")
        print(f"Regenerate: `{REGENERATE.format(impl=impl)}` then "
              f"`python -m conformance.report out/conformance-{impl}.json --markdown`.\n")
        print("Counts per check and backend, as pass/fail/xfail/unsupported:\n")
        print("\n".join(count_table(rows, markdown=True)))
        print("\nPer model:\n")
        print("\n".join(model_matrix(rows, markdown=True)))
        xfails = sorted({(r["model"], r["backend"], r["check"], r.get("message", "")) for r in rows
                         if r["status"] == "xfail"})
        if xfails:
            print("\nKnown failures (reasons from the implementation's known-failures file):\n")
            for model, backend, check, message in xfails:
                print(f"- {model}/{backend}/{check}: {message.splitlines()[0] if message else ''}")
        return 0
    print("\n".join(model_matrix(rows, markdown=False)))
    print()
    print("\n".join(count_table(rows)))
    summary = data.get("summary", {})
    print("rows: " + ", ".join(f"{n} {s}" for s, n in summary.items() if n))
    return 0


if __name__ == "__main__":
    sys.exit(main())
