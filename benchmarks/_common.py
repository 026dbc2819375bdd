"""What every benchmark shares: timing, a plain-text table, JSON next to a PNG plot, versions.

Each benchmark writes ``<out>/<name>.json`` (the numbers, the command line and the installed
versions, so a number can be traced back to the run that made it) and ``<out>/<name>.png``
beside it. The plot needs matplotlib (pinned in hfexport/pins/constraints.txt, installed by the dev extra); without it the
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
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

DEFAULT_OUT = Path(__file__).resolve().parent / "results"


def versions() -> dict[str, Any]:
    from hfexport.environment import installed_versions

    return {"python": platform.python_version(), "cpu_count": os.cpu_count(), **installed_versions()}


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


class PeakRss:
    """Peak resident memory of this process while the block runs, sampled every ``interval`` seconds.

    ``ru_maxrss`` only ever grows over a process's life, so it cannot give one export's peak after another
    export; a sampling thread reading /proc/self/statm can (it may miss a spike shorter than the interval).
    ``peak_mib``: the highest RSS seen; ``delta_mib``: that minus the RSS when the block started."""

    def __init__(self, interval: float = 0.005) -> None:
        import threading

        self.interval = interval
        self.peak_mib = self.start_mib = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    @staticmethod
    def rss_mib() -> float:
        try:
            with open("/proc/self/statm") as f:
                pages = int(f.read().split()[1])
            return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
        except (OSError, ValueError, IndexError):  # not Linux: the process's lifetime peak instead
            import resource

            return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak_mib = max(self.peak_mib, self.rss_mib())
            self._stop.wait(self.interval)

    def __enter__(self) -> PeakRss:
        self.start_mib = self.peak_mib = self.rss_mib()
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()
        self.peak_mib = max(self.peak_mib, self.rss_mib())

    @property
    def delta_mib(self) -> float:
        return self.peak_mib - self.start_mib


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
              "version in hfexport/pins/constraints.txt)", file=sys.stderr)
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


def zoo_sample(name: str) -> tuple[Any, dict[str, Any]]:
    """(the conformance zoo entry's seeded model, its sample inputs)."""
    from conformance.zoo import get

    entry = get(name)
    model = entry.model()
    return model, entry.sample_inputs(model)


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
