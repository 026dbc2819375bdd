"""What every benchmark shares: timing, a plain-text table, JSON next to a PNG plot, versions.

Each benchmark writes ``<out>/<name>.json`` (the numbers, the command line and the installed
versions, so a number can be traced back to the run that made it) and ``<out>/<name>.png``
beside it. The plot needs matplotlib (pinned in hfexport/pins/test.txt); without it the
JSON is still written and the plot is skipped with a message.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

DEFAULT_OUT = Path(__file__).resolve().parent / "results"


def versions() -> dict[str, Any]:
    from hfexport.environment import installed_versions

    return {"python": platform.python_version(), "cpu_count": os.cpu_count(), **installed_versions()}


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def median(values: Iterable[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A fixed-width text table; floats get 3 significant decimals, None prints as '-'."""
    def cell(v: Any) -> str:
        if v is None:
            return "-"
        if isinstance(v, float):
            return f"{v:.3f}" if abs(v) < 1000 else f"{v:.0f}"
        return str(v)

    cells = [[cell(v) for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths))
    out = [line, "-" * len(line)]
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in cells]
    return "\n".join(out)


def write_json(out_dir: Path, name: str, payload: dict[str, Any]) -> Path:
    """Atomic write: a reader never sees half a result file."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.json"
    payload = {"benchmark": name, "argv": sys.argv, "when": time.strftime("%Y-%m-%dT%H:%M:%S"),
               "versions": versions(), **payload}
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=out_dir)
    with os.fdopen(fd, "w") as f:
        json.dump(payload, f, indent=2, default=str)
        f.write("\n")
    os.replace(tmp, path)
    return path


def pyplot() -> Any:
    """matplotlib.pyplot with a file-only backend, or None (and a message) when it is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        return plt
    except ImportError:
        print("matplotlib is not installed: skipping the plot (pip install 'matplotlib==3.11.2', the pinned "
              "version in hfexport/pins/test.txt)", file=sys.stderr)
        return None


def bar_plot(out_dir: Path, name: str, title: str, labels: Sequence[str], series: dict[str, Sequence[float | None]],
             ylabel: str, log: bool = False) -> Path | None:
    """Grouped bars: one group per label, one bar per series; missing values are left out."""
    plt = pyplot()
    if plt is None:
        return None
    n = max(1, len(series))
    width = 0.8 / n
    fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(labels) + 2), 4.0))
    for i, (series_name, values) in enumerate(series.items()):
        xs = [j + (i - (n - 1) / 2) * width for j in range(len(labels))]
        pts = [(x, v) for x, v in zip(xs, values) if v is not None]
        if pts:
            ax.bar([p[0] for p in pts], [p[1] for p in pts], width, label=series_name)
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, rotation=30, ha="right")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if log:
        ax.set_yscale("log")
    if len(series) > 1:
        ax.legend()
    fig.tight_layout()
    path = out_dir / f"{name}.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def quiet_logs() -> None:
    """Benchmarks print their own table; library warnings would bury it."""
    import logging
    import warnings

    logging.basicConfig(level=logging.ERROR)
    warnings.filterwarnings("ignore")
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
    except ImportError:
        pass
