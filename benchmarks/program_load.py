"""Reading a saved ``.pt2`` program: torch's own ``torch.export.load`` against hfexport's load (the same call with
the ``program-load`` patches of ``hfexport.patching.program_load``), per zoo model and artifact.

Every Dynamo check of a warm suite run (artifacts served from the cache) starts by reading programs, and runners
built in a service do too. The script exports each zoo entry with Dynamo (the plain export and the
``export_for_generation`` components, dynamic shapes), saves them to a temporary folder, then reads every file
``--repeat`` times each way, taking turns, the fastest read counting, and prints hfexport / torch per file and the
median over the files. It also checks that both reads give the same program (graph, every node's value, range
constraints) and exits non-zero when one differs.

    python benchmarks/program_load.py
    python benchmarks/program_load.py --models llama,t5 --repeat 5
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import sys
import tempfile
from pathlib import Path
from typing import Any

import _common

DEFAULT_MODELS = "llama,gemma3,qwen2_vl,t5,whisper,bert,funnel"


def same_program(a: Any, b: Any) -> bool:
    """Both reads gave the same program: graph code, every node's value (shapes and symbols), range constraints."""
    if str(a.graph) != str(b.graph) or str(a.range_constraints) != str(b.range_constraints):
        return False
    return all(str(x.meta.get("val")) == str(y.meta.get("val")) for x, y in zip(a.graph.nodes, b.graph.nodes))


def saved_artifacts(names: list[str], folder: Path) -> list[tuple[str, Path]]:
    """(label, path) of every .pt2 the Dynamo exports of ``names`` write."""
    from conformance.zoo import get
    from hfexport import AutoExportConfig, AutoHfExporter

    config = AutoExportConfig.from_dict({"export_format": "dynamo", "dynamic": True})
    exporter = AutoHfExporter.from_config(config)
    files = []
    for name in names:
        entry = get(name)
        model = entry.model()
        inputs = entry.sample_inputs(model)
        programs = {"model": exporter.export(model, copy.deepcopy(inputs), config)}
        if "generation" in entry.checks:
            programs.update(exporter.export_for_generation(model, copy.deepcopy(inputs), config))
        for part, program in programs.items():
            path = folder / f"{name}-{part}.pt2"
            exporter.save(program, str(path))
            files.append((f"{name} {part}", path))
        print(f"exported {name}: {', '.join(programs)}", file=sys.stderr)
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=DEFAULT_MODELS, help=f"comma list of zoo entries (default: {DEFAULT_MODELS})")
    parser.add_argument("--repeat", type=int, default=3, help="reads per file and way; the fastest counts")
    parser.add_argument("--out", type=Path, default=_common.DEFAULT_OUT)
    args = parser.parse_args(argv)
    _common.quiet_logs()
    import torch

    from hfexport import caches
    from hfexport.patching import apply_patches
    from hfexport.patching.program_load import PROGRAM_LOAD

    caches.register_cache_pytrees()
    rows, differ = [], []
    with tempfile.TemporaryDirectory(prefix="hfexport-program-load-") as tmp:
        for label, path in saved_artifacts(args.models.split(","), Path(tmp)):
            nodes = len(torch.export.load(str(path)).graph.nodes)  # first-use costs stay out of the timings
            best: dict[str, float] = {}
            read: dict[str, Any] = {}
            for turn in range(2 * args.repeat):
                way = "hfexport" if turn % 2 else "torch"
                with apply_patches(PROGRAM_LOAD) if way == "hfexport" else contextlib.nullcontext():
                    seconds, read[way] = _common.timed(lambda: torch.export.load(str(path)))
                best[way] = min(best.get(way, seconds), seconds)
            if not same_program(read["torch"], read["hfexport"]):
                differ.append(label)
            rows.append([label, nodes, best["torch"], best["hfexport"], best["hfexport"] / best["torch"]])
    print(f"torch.export.load against hfexport's load; fastest of {args.repeat} reads each")
    print(_common.table(["artifact", "nodes", "torch s", "hfexport s", "hfexport / torch"], rows))
    total_torch, total_ours = sum(r[2] for r in rows), sum(r[3] for r in rows)
    print(f"median hfexport / torch: {_common.median(r[4] for r in rows):.3f}; all files: {total_ours:.2f} s against "
          f"{total_torch:.2f} s ({total_ours / total_torch:.3f})")
    labels = [r[0] for r in rows]
    _common.bar_plot(args.out, "program_load", "reading a .pt2 program: hfexport / torch", labels,
                     {"hfexport / torch": [r[4] for r in rows]}, "ratio")
    payload = {"rows": [dict(zip(["artifact", "nodes", "torch_s", "hfexport_s", "ratio"], r)) for r in rows],
               "differ": differ}
    print(f"wrote {_common.write_json(args.out, 'program_load', payload)}")
    if differ:
        print(f"the two reads differ for: {', '.join(differ)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
