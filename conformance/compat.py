"""``make compat``: the default tier on every stack of the tested window, gated against the pinned stack.

A stack is the pinned stack (``hfexport/pins/constraints.txt``) with a few releases put in its place, as
``hfexport/pins/window.toml`` declares. For each stack this builds one virtual environment under ``.venvs/<stack>``
(kept between runs, rebuilt when its constraints or the install requirements change), runs the default tier in it
(the same command as ``make run``) with ``--hfexport-report out/compat/<stack>.json``, gates that report against
the pinned stack's (``pytest_hfexport.gate``), and writes what it found to ``docs/reports/compatibility.json`` and
``docs/compatibility.md``: stacks x backends, pass counts, wall time and every regression grouped by cause.

    python -m conformance.compat                                # every stack (the pinned stack first)
    python -m conformance.compat --stacks transformers-5.25     # one stack (a CI job of the matrix)
    python -m conformance.compat --write-docs                   # the page again from the kept results
    python -m conformance.compat --merge out/compat/*.summary.json   # fold a CI matrix's jobs into the page

The suite never imports hfexport: the window file is read as data, from the hfexport package's folder.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

from pytest_hfexport import gate
from pytest_hfexport.report import count_table

ROOT = Path(__file__).resolve().parents[1]
PINNED = "pinned"
TIER = ["-m", "pytest", "-n", "2", "--dist", "loadgroup", "conformance", "-p", "no:cacheprovider"]
# Where the results and the page go (a test points these elsewhere, so it never rewrites the repository's docs).
DOCS = Path(os.environ.get("HFEXPORT_COMPAT_DOCS", ROOT / "docs"))
RESULTS = DOCS / "reports" / "compatibility.json"
PAGE = DOCS / "compatibility.md"
OUT = Path(os.environ.get("HFEXPORT_COMPAT_OUT", ROOT / "out" / "compat"))


def pins_dir() -> Path:
    spec = importlib.util.find_spec("hfexport")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("compat: the hfexport package is not installed here")
    return Path(list(spec.submodule_search_locations)[0]) / "pins"


def read_window() -> dict[str, Any]:
    return tomllib.loads((pins_dir() / "window.toml").read_text())


def read_constraints() -> dict[str, str]:
    pins = {}
    for raw in (pins_dir() / "constraints.txt").read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            name, version = line.split("==")
            pins[name.strip().lower()] = version.strip()
    return pins


def stack_pins(stack: str, window: dict[str, Any] | None = None) -> dict[str, str]:
    """The pinned stack with the stack's releases in place."""
    window = window or read_window()
    if stack not in window.get("stacks", {}):
        raise SystemExit(f"compat: no stack {stack!r} in window.toml (stacks: {', '.join(window['stacks'])})")
    return {**read_constraints(), **window["stacks"][stack]}


def _fingerprint(pins: dict[str, str]) -> str:
    text = json.dumps(pins, sort_keys=True) + (ROOT / "pyproject.toml").read_text()
    text += "".join(p.read_text() for p in sorted(pins_dir().glob("requires-*.txt")))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def pip(python: Path, *args: str) -> None:
    # pip at error level: a machine's pip configuration may name indexes that do not exist there.
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--quiet", *args], check=True, cwd=ROOT)


def ensure_venv(stack: str, venvs: Path) -> Path:
    """The stack's virtual environment, built when missing or stale: torch first at the stack's release (so no
    other package's range can pull another torch), then hfexport with every extra under the stack's constraints."""
    pins = stack_pins(stack)
    own = ROOT / ".venv" / "bin" / "python"
    if stack == PINNED and own.exists() and (ROOT / ".venv" / ".hfexport-installed").exists():
        return own  # make's own environment is the pinned stack
    venv = venvs / stack
    python = venv / "bin" / "python"
    stamp = venv / ".hfexport-stack"
    fingerprint = _fingerprint(pins)
    if python.exists() and stamp.exists() and stamp.read_text() == fingerprint:
        return python
    print(f"compat: building {venv} ({', '.join(f'{k}=={v}' for k, v in pins.items() if k in _MOVED)})", flush=True)
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    constraints = venv / "constraints.txt"
    constraints.write_text("".join(f"{name}=={version}\n" for name, version in pins.items()))
    pip(python, f"torch=={pins['torch']}")
    pip(python, "-c", str(constraints), "-e", ".[all,test]")
    stamp.write_text(fingerprint)
    return python


_MOVED = ("torch", "transformers", "onnx", "onnxscript", "onnxruntime", "executorch")


def run_tier(stack: str, python: Path, out: Path, baseline: Path | None, extra: list[str]) -> dict[str, Any]:
    """The default tier in the stack's environment; its report, the gate against the baseline, the wall time."""
    report = out / f"{stack}.json"
    command = [str(python), *TIER, f"--hfexport-report={report}", *extra]
    if baseline is not None:
        command.append(f"--hfexport-baseline={baseline}")
    print("compat:", " ".join(command), flush=True)
    started = time.time()
    done = subprocess.run(command, cwd=ROOT)
    wall = round(time.time() - started, 1)
    return summarise(stack, report, baseline, wall, done.returncode, " ".join(["python", *TIER, *extra]))


def summarise(
    stack: str, report: Path, baseline: Path | None, wall: float, exit_code: int, command: str
) -> dict[str, Any]:
    data = json.loads(report.read_text())
    rows = data["rows"]
    result = gate.compare(gate.load_rows(report), gate.load_rows(baseline)) if baseline is not None else None
    return {
        "stack": stack,
        "versions": {k: v for k, v in data["versions"].items() if k in _MOVED},
        "wall_s": wall,
        "exit_code": exit_code,
        "command": command,
        "summary": data["summary"],
        "counts": count_table(rows, markdown=True),
        "gate": result.to_json() if result is not None else None,
    }


def load_results() -> dict[str, Any]:
    return json.loads(RESULTS.read_text()) if RESULTS.exists() else {}


def write_results(results: dict[str, Any]) -> None:
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")


def page(results: dict[str, Any], window: dict[str, Any]) -> str:
    """docs/compatibility.md from the kept results."""
    lines = [
        "# Compatibility: the tested window",
        "",
        "hfexport installs into any environment inside the window below without moving a version; outside it, it",
        "warns and names the window (declared with its stacks in `hfexport/pins/window.toml`). Each stack is the",
        "pinned stack (`hfexport/pins/constraints.txt`) with its row's releases in place. `make compat` runs the",
        "default tier (`make run`'s command) in one virtual environment per stack, gates each run against the",
        "pinned stack's report and writes this page from `docs/reports/compatibility.json`.",
        "",
        "| package | window |",
        "|---|---|",
    ]
    for name, entry in window["packages"].items():
        if entry["extra"] in ("core", "onnx", "executorch"):
            lines.append(f"| {name} | {entry['window'][0]} to {entry['window'][1]} |")
    lines += [
        "",
        "## Stacks",
        "",
        "Regressions are rows that pass on the pinned stack and not on this one; each is a known failure declared",
        "for that stack's releases (a strict xfail with its measured message), listed by cause below.",
        "",
        "| stack | releases | tests pass / fail / xfail / skipped or unsupported | regressions | default tier wall |",
        "|---|---|---|---|---|",
    ]
    for stack in window["stacks"]:
        res = results.get(stack)
        moved = ", ".join(f"{k} {v}" for k, v in window["stacks"][stack].items()) or "the pinned stack"
        if res is None:
            lines.append(f"| {stack} | {moved} | not measured | | |")
            continue
        s = res["summary"]
        counts = f"{s['pass']} / {s['fail'] + s['error'] + s['xpass']} / {s['xfail']} / {s['unsupported'] + s['skip']}"
        regressions = res["gate"]["regressions"] if res.get("gate") else "(baseline)"
        minutes, seconds = divmod(int(res["wall_s"]), 60)
        lines.append(f"| {stack} | {moved} | {counts} | {regressions} | {minutes} min {seconds} s |")
    pinned = results.get(PINNED)
    if pinned is not None:
        lines += ["", "Per check and backend on the pinned stack (pass/fail/xfail/unsupported):", ""]
        lines += pinned["counts"]
    lines += ["", "## Regressions by cause", "", "Every other stack differs from the pinned one only in these rows:"]
    for stack in window["stacks"]:
        res = results.get(stack)
        if res is None or stack == PINNED:
            continue
        causes = (res.get("gate") or {}).get("causes") or []
        lines += ["", f"### {stack}", ""]
        lines += [
            f"- {c['rows']} x `{c['cause']}` ({', '.join(c['backends'])}; e.g. {c['example']})" for c in causes
        ] or ["None."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance.compat", description=__doc__.split("\n\n")[0])
    parser.add_argument("--stacks", nargs="+", help="run only these stacks (default: every stack of window.toml)")
    parser.add_argument("--venvs", default=str(ROOT / ".venvs"), help="where the virtual environments live")
    parser.add_argument("--out", default=str(OUT), help="where the reports go")
    parser.add_argument("--write-docs", action="store_true", help="only write docs/compatibility.md again")
    parser.add_argument("--pytest-args", default="", help="extra pytest arguments (e.g. -k to run a part)")
    parser.add_argument(
        "--merge",
        nargs="+",
        metavar="SUMMARY",
        help="fold the <stack>.summary.json files that jobs of a CI matrix wrote into the results, then write the page",
    )
    parser.add_argument(
        "--regate",
        action="store_true",
        help="gate every kept stack report in --out against the "
        "pinned stack's report there again (after a new pinned run), then write the page",
    )
    parser.add_argument("--build-only", action="store_true", help="build the stacks' environments, run nothing")
    args = parser.parse_args(argv)
    window = read_window()
    results = load_results()
    for summary in args.merge or []:
        entry = json.loads(Path(summary).read_text())
        results[entry["stack"]] = entry
    if args.merge:
        write_results(results)
    if args.regate:
        out = Path(args.out)
        for stack, entry in results.items():
            if stack != PINNED and (out / f"{stack}.json").exists():
                results[stack] = summarise(
                    stack,
                    out / f"{stack}.json",
                    out / f"{PINNED}.json",
                    entry["wall_s"],
                    entry["exit_code"],
                    entry["command"],
                )
        write_results(results)
    if not args.write_docs and not args.merge and not args.regate:
        out, venvs = Path(args.out), Path(args.venvs)
        out.mkdir(parents=True, exist_ok=True)
        stacks = args.stacks or list(window["stacks"])
        baseline = out / f"{PINNED}.json"
        if PINNED not in stacks and not baseline.exists():
            stacks = [PINNED, *stacks]  # the gate needs the pinned stack's report first
        stacks = sorted(stacks, key=lambda s: s != PINNED)
        failed = False
        for stack in stacks:
            python = ensure_venv(stack, venvs)
            if args.build_only:
                continue
            result = run_tier(stack, python, out, None if stack == PINNED else baseline, args.pytest_args.split())
            results[stack] = result
            write_results(results)
            (out / f"{stack}.summary.json").write_text(json.dumps(result, indent=2))
            failed |= result["exit_code"] != 0
            print(f"compat: {stack}: exit {result['exit_code']}, {result['wall_s']} s", flush=True)
    PAGE.write_text(page(results, window))
    print(f"compat: wrote {PAGE}")
    return 1 if not args.write_docs and not args.merge and not args.regate and failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
