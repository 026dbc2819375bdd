"""The coverage report's chart: per backend, the export share of each implementation."""

from __future__ import annotations

from pathlib import Path

BACKEND_ORDER = ("dynamo", "onnx", "executorch")
LABELS = {"hfexport": "hfexport", "transformers": "peer (transformers.exporters)"}


def chart(table: dict[str, dict[str, dict[str, int]]], path: Path) -> Path | None:
    """Grouped bars: per backend, the export share of each implementation (on the common architectures)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    backends = [b for b in BACKEND_ORDER if any(b in table[i] for i in table)]
    fig, ax = plt.subplots(figsize=(7, 3.6))
    width = 0.38
    for offset, impl in enumerate(table):
        values = []
        for backend in backends:
            row = table[impl].get(backend, {})
            values.append(100 * row.get("export", 0) / row["buildable"] if row.get("buildable") else 0)
        xs = [i + (offset - 0.5) * width for i in range(len(backends))]
        bars = ax.bar(xs, values, width, label=LABELS.get(impl, impl))
        ax.bar_label(bars, fmt="%.0f%%", fontsize=8)
    ax.set_xticks(range(len(backends)), backends)
    ax.set_ylabel("buildable architectures that export and match (%)")
    ax.set_ylim(0, 105)
    ax.legend(fontsize=8)
    ax.set_title("transformers coverage, plain dynamic export", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
