"""``out/coverage/report.md`` (and its chart ``report.png``) from the sweeps' pytest JSON reports of both
implementations (``rows``).

Per backend: the share of buildable architectures whose plain dynamic export matches eager, and of
generative ones whose generation matches, hfexport and the peer side by side on the architectures
both sweeps measured (each implementation's own totals too). Then the failure causes (stage and
normalised message) per implementation, the reasons architectures are not buildable, and one row
per architecture. The versions, dates and exact commands of the sweeps head the page.

    python -m conformance.coverage --report [--hfexport FILE]... [--peer FILE]... [--markdown out/coverage/report.md]
"""

from __future__ import annotations

import collections
import datetime
from pathlib import Path
from typing import Any

from . import rows
from .chart import BACKEND_ORDER, LABELS, chart
from .normalise import cause
from .triage import triage

IMPLS = ("hfexport", "transformers")
SHORT = {"hfexport": "hfexport", "transformers": "peer"}
TOP_CAUSES = 25


def export_ok(record: dict[str, Any]) -> bool:
    return record.get("checks", {}).get("export", {}).get("status") == "pass"


def sample_ok(record: dict[str, Any]) -> bool:
    return bool(record.get("checks", {}).get("export", {}).get("sample_ok"))


def generation_ok(record: dict[str, Any]) -> bool:
    return record.get("checks", {}).get("generation", {}).get("status") == "pass"


def _share(hits: int, total: int) -> str:
    return f"{hits}/{total} ({100 * hits / total:.0f}%)" if total else "-"


def shares(cells: dict[str, dict[str, Any]], keys: set[str] | None = None) -> dict[str, dict[str, int]]:
    """backend -> buildable, export_ok, generative, generation_ok, unsupported, not_buildable counts."""
    out: dict[str, dict[str, int]] = {}
    for key, r in cells.items():
        if keys is not None and key not in keys:
            continue
        row = out.setdefault(
            r["backend"],
            {
                "buildable": 0,
                "export": 0,
                "sample": 0,
                "generative": 0,
                "generation": 0,
                "unsupported": 0,
                "not_buildable": 0,
            },
        )
        if r["status"] == "not_buildable":
            row["not_buildable"] += 1
            continue
        row["buildable"] += 1
        row["export"] += export_ok(r)
        row["sample"] += sample_ok(r)
        row["unsupported"] += r["status"] == "unsupported"
        generation = r.get("checks", {}).get("generation")
        if generation is not None and generation.get("status") != "not_buildable":
            row["generative"] += 1
            row["generation"] += generation_ok(r)
    return out


def failure_causes(cells: dict[str, dict[str, Any]]) -> collections.Counter[str]:
    return collections.Counter(cause(r["stage"], r["message"]) for r in cells.values() if r["status"] == "fail")


def unbuildable_causes(cells: dict[str, dict[str, Any]]) -> collections.Counter[str]:
    seen: dict[str, str] = {}
    for r in cells.values():
        if r["status"] == "not_buildable":
            seen[r["arch"]] = cause(r["stage"], r["message"])
    return collections.Counter(seen.values())


def triaged_failures(cells: dict[str, dict[str, Any]]) -> list[str]:
    """Every failing hfexport cell with its triage entry (``triage.TRIAGE``), or marked not triaged."""
    failing = sorted((r for r in cells.values() if r["status"] == "fail"), key=lambda r: (r["arch"], r["backend"]))
    lines = ["", "## hfexport failures, triaged", ""]
    if not failing:
        return lines + ["No failures."]
    found = [(r, triage(r)) for r in failing]
    untriaged = sum(1 for _, t in found if t is None)
    lines += [
        f"{len(failing)} failing cells; {untriaged} not triaged yet. Entries live in "
        "`conformance/coverage/triage.py`: `structural` (no exporter can match eager: a random forward, a "
        "runtime without the kernel), `fix` (an hfexport defect, with what its analysis found).",
        "",
        "| architecture | backend | stage: cause | triage |",
        "|---|---|---|---|",
    ]
    for record, entry in found:
        verdict = f"{entry.kind}: {entry.reason}" if entry else "not triaged"
        lines.append(
            f"| {record['arch']} | {record['backend']} | {_md(cause(record['stage'], record['message']))} | "
            f"{_md(verdict)} |"
        )
    return lines


def cell_seconds(cells: dict[str, dict[str, Any]]) -> dict[str, dict[str, float]]:
    """backend -> median, mean and count of the seconds a buildable cell took (build excluded)."""
    import statistics

    by_backend: dict[str, list[float]] = {}
    for r in cells.values():
        if r["status"] != "not_buildable" and isinstance(r.get("seconds"), (int, float)):
            by_backend.setdefault(r["backend"], []).append(float(r["seconds"]))
    return {
        b: {"median": statistics.median(v), "mean": statistics.fmean(v), "n": len(v)}
        for b, v in sorted(
            by_backend.items(), key=lambda kv: BACKEND_ORDER.index(kv[0]) if kv[0] in BACKEND_ORDER else 9
        )
    }


def cell_text(record: dict[str, Any] | None) -> str:
    if record is None:
        return ""
    status = record["status"]
    if status == "not_buildable":
        return "n/b"
    if status == "unsupported":
        return "unsup."
    if export_ok(record):
        generation = record.get("checks", {}).get("generation", {})
        gen = generation.get("status")
        if gen == "fail":
            return f"✓ gen ✗ {generation.get('stage', '')}"
        return "✓ gen ✓" if gen == "pass" else "✓"
    text = f"✗ {record.get('stage', '')}"
    if sample_ok(record):
        text += ", b1 ✓"
    generation = record.get("checks", {}).get("generation", {})
    if generation.get("status") in ("pass", "fail"):
        text += " gen " + ("✓" if generation["status"] == "pass" else f"✗ {generation.get('stage', '')}")
    return text


def _runs(data: dict[str, Any] | None) -> list[dict[str, Any]]:
    return list(data.get("runs", [])) if data else []


def render(
    datas: dict[str, dict[str, Any] | None],
    cells: dict[str, dict[str, dict[str, Any]]],
    enumerated: int | None,
    chart_name: str | None,
) -> str:
    """The report's markdown: ``datas`` the merged reports (their runs head the page), ``cells`` what they measured."""
    archs_by_impl = {impl: {(r["arch"], r["backend"]) for r in c.values()} for impl, c in cells.items()}
    common_pairs = set.intersection(*archs_by_impl.values()) if archs_by_impl else set()
    common = {impl: {k for k, r in c.items() if (r["arch"], r["backend"]) in common_pairs} for impl, c in cells.items()}
    lines = ["# Coverage of transformers: export and match, per architecture", ""]
    lines += [
        "Generated by `python -m conformance.coverage --report` from the sweeps' pytest reports "
        f"on {datetime.date.today().isoformat()}. Every model class registered in the Auto mappings is built tiny "
        "from its config class (seeded random weights), exported with `dynamic=True` from a batch-1 sample through the "
        "implementation's adapter, saved, loaded back and run at the sample and at batch 2 x another length; outputs "
        "are compared with eager by `pytest_hfexport.compare`. Generative heads also export their generation "
        "components and must give eager `generate()`'s 16 greedy tokens.",
        "",
    ]
    for impl, data in datas.items():
        runs = _runs(data)
        if not runs:
            lines.append(f"- {LABELS[impl]}: no report.")
            continue
        for run in runs:
            versions = ", ".join(f"{k} {v}" for k, v in (run.get("versions") or {}).items() if v)
            source = f", converted from `{run['converted_from']}`" if run.get("converted_from") else ""
            lines.append(
                f"- {LABELS[impl]}: `{run['file']}`{source}: {str(run.get('created'))[:10]}, "
                f"{run.get('wall_s') or 0:.0f} s of wall time (`{run.get('command')}`); {versions}."
            )
    measured = {impl: len({r["arch"] for r in c.values()}) for impl, c in cells.items()}
    buildable = {
        impl: len({r["arch"] for r in c.values() if r["status"] != "not_buildable"}) for impl, c in cells.items()
    }
    lines += [
        "",
        "Reproduce: `make coverage` (hfexport's sweep, then this report with the peer's committed report "
        "`docs/reports/coverage/transformers.json`). `make coverage-peer` measures the peer again and rewrites it.",
        "",
    ]
    lines.append(
        (f"Enumerated: {enumerated} model classes. " if enumerated else "")
        + "Measured: "
        + ", ".join(f"{LABELS[i]} {measured[i]} ({buildable[i]} buildable)" for i in cells)
        + "."
    )
    lines += ["", "## Time", ""]
    for impl in cells:
        timing = cell_seconds(cells[impl])
        if not timing:
            continue
        parts = [
            f"{b} median {t['median']:.0f} s, mean {t['mean']:.0f} s over {t['n']} cells" for b, t in timing.items()
        ]
        wall = sum(float(r.get("wall_s") or 0) for r in _runs(datas[impl]))
        lines.append(f"- {LABELS[impl]}: " + "; ".join(parts) + f"; {wall:.0f} s of wall time in all.")
    lines += ["", "## Shares per backend", ""]
    table = {impl: shares(cells[impl], common[impl]) for impl in cells}
    lines.append(
        "On the architecture x backend cells both implementations measured "
        f"({len(common_pairs)}): buildable cells whose plain dynamic export matches eager at the sample and at "
        "batch 2 x another length (export), at the batch-1 sample it was traced on only (sample), and generative "
        "ones whose generation matches."
    )
    lines += ["", "| backend | buildable | " + " | ".join(f"{SHORT[i]} export" for i in cells) + " | "]
    lines[-1] += " | ".join(f"{SHORT[i]} sample" for i in cells) + " | "
    lines[-1] += " | ".join(f"{SHORT[i]} generation" for i in cells) + " |"
    lines.append("|---" * (2 + 3 * len(cells)) + "|")
    for backend in BACKEND_ORDER:
        rows = [table[i].get(backend) for i in cells]
        if not any(rows):
            continue
        first = next(r for r in rows if r)
        lines.append(
            f"| {backend} | {first['buildable']} | "
            + " | ".join(_share(r["export"], r["buildable"]) if r else "-" for r in rows)
            + " | "
            + " | ".join(_share(r["sample"], r["buildable"]) if r else "-" for r in rows)
            + " | "
            + " | ".join(_share(r["generation"], r["generative"]) if r else "-" for r in rows)
            + " |"
        )
    if chart_name:
        lines += ["", f"![export shares per backend]({chart_name})"]
    lines += ["", "Each implementation on everything it measured:", ""]
    for impl in cells:
        own = shares(cells[impl])
        parts = [
            f"{b}: export {_share(own[b]['export'], own[b]['buildable'])}, generation "
            f"{_share(own[b]['generation'], own[b]['generative'])}, unsupported {own[b]['unsupported']}"
            for b in BACKEND_ORDER
            if b in own
        ]
        lines.append(f"- {LABELS[impl]}: " + "; ".join(parts) + ".")
    for impl in cells:
        counts = failure_causes(cells[impl])
        lines += ["", f"## Failure causes: {LABELS[impl]}", ""]
        if not counts:
            lines.append("No failures.")
            continue
        lines += ["| cells | stage: cause |", "|---|---|"]
        lines += [f"| {n} | {_md(c)} |" for c, n in counts.most_common(TOP_CAUSES)]
        if len(counts) > TOP_CAUSES:
            lines.append(
                f"| {sum(counts.values()) - sum(n for _, n in counts.most_common(TOP_CAUSES))} | (other causes) |"
            )
    if "hfexport" in cells:
        lines += triaged_failures(cells["hfexport"])
    merged: dict[str, dict[str, Any]] = {}
    for impl in cells:
        merged.update(cells[impl])
    unbuildable = unbuildable_causes(merged)
    lines += ["", "## Not buildable", ""]
    lines += ["Architectures the sweep could not build tiny or feed (not export failures):", ""]
    lines += ["| architectures | stage: reason |", "|---|---|"]
    lines += [f"| {n} | {_md(c)} |" for c, n in unbuildable.most_common(TOP_CAUSES)]
    lines += ["", "## Per architecture", ""]
    backends = [b for b in BACKEND_ORDER if any(r["backend"] == b for c in cells.values() for r in c.values())]
    columns = [(impl, b) for impl in cells for b in backends]
    lines.append(
        "| architecture | head | " + " | ".join(f"{'peer' if i != 'hfexport' else i} {b}" for i, b in columns) + " |"
    )
    lines.append("|---" * (2 + len(columns)) + "|")
    index: dict[tuple[str, str, str], dict[str, Any]] = {}
    heads: dict[str, str] = {}
    for impl, c in cells.items():
        for r in c.values():
            index[(impl, r["arch"], r["backend"])] = r
            heads[r["arch"]] = r["head"]
    for arch in sorted(heads):
        lines.append(
            f"| {arch} | {heads[arch]} | "
            + " | ".join(_md(cell_text(index.get((i, arch, b)))) for i, b in columns)
            + " |"
        )
    lines += [
        "",
        "Legend: ✓ export matches eager; ✗ stage of the failure (b1 ✓: it matched at the batch-1 sample before "
        "failing); gen ✓/✗ generation (stage); unsup. declared unsupported by the adapter; n/b not buildable.",
        "",
    ]
    return "\n".join(lines)


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def write_report(reports: dict[str, list[Path]], markdown: Path) -> Path:
    """The page from each implementation's reports (``reports``: impl -> its JSON files) and the chart beside it."""
    from .enumerate import architectures
    from .verdicts import current_verdicts

    enumerated = architectures()
    heads = {arch.name: arch.head for arch in enumerated}
    datas = {impl: rows.load(reports.get(impl, [])) for impl in IMPLS}
    commands = " ".join(str(r.get("command")) for d in datas.values() for r in _runs(d))
    whole = "coverage-sweep all" in commands or "coverage-sweep=all" in commands
    scope = {arch.name for arch in (enumerated if whole else architectures(scope="types"))}
    unbuildable = {k: v for k, v in current_verdicts().items() if k.split("|", 1)[0] in scope}
    cells = {impl: rows.cells(data, heads, unbuildable) for impl, data in datas.items()}
    png = markdown.with_suffix(".png")
    pairs = [{(r["arch"], r["backend"]) for r in c.values()} for c in cells.values()]
    common_pairs = set.intersection(*pairs) if pairs else set()
    table = {
        impl: shares(c, {k for k, r in c.items() if (r["arch"], r["backend"]) in common_pairs})
        for impl, c in cells.items()
    }
    drawn = chart(table, png)
    markdown.parent.mkdir(parents=True, exist_ok=True)
    markdown.write_text(render(datas, cells, len(enumerated), drawn.name if drawn else None))
    return markdown
