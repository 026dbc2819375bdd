"""``hfexport env``: installed versions beside the tested pins, and which export backends are usable here."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from typing import Any

from .errors import EXIT_OK
from .progress import Progress


def backend_status() -> list[dict[str, Any]]:
    """Per registered backend: are its packages importable, does validate_environment pass, is there a
    decode loop runner."""
    from ..backends import BACKENDS
    from ..environment import is_importable

    rows = []
    for name, descriptor in sorted(BACKENDS.items()):
        cls = descriptor.exporter_class()
        missing = [p for p in cls.required_packages if not is_importable(p)]
        row: dict[str, Any] = {"backend": name, "exporter": cls.__name__, "missing_packages": missing}
        try:
            cls.validate_environment()
            row["environment"] = "ok"
        except Exception as exc:  # noqa: BLE001 - reported, not raised
            row["environment"] = f"{type(exc).__name__}: {exc}"
        if descriptor.decode_loop is None:
            row["decode_loop"] = "none"
        else:
            try:
                descriptor.decode_loop_class()
                row["decode_loop"] = "ok"
            except Exception as exc:  # noqa: BLE001
                row["decode_loop"] = f"unavailable: {type(exc).__name__}: {exc}"
        row["usable"] = not missing and row["environment"] == "ok"
        rows.append(row)
    return rows


def cmd_env(args: argparse.Namespace, progress: Progress) -> tuple[int, dict[str, Any]]:
    from .. import __version__
    from ..environment import environment_report, in_window, read_window

    window = read_window()["packages"]

    def status(p: Any) -> str:
        if p.missing:
            return "missing"
        if not p.drift:
            return "ok"
        return "in window" if in_window(p.name, p.installed) else "OUTSIDE window"

    packages = [
        {
            "package": p.name,
            "pinned": p.pinned,
            "installed": p.installed,
            "window": " to ".join(window[p.name]["window"]) if p.name in window else None,
            "status": status(p),
        }
        for p in environment_report()
    ]
    return EXIT_OK, {
        "hfexport": __version__,
        "python": sys.version.split()[0],
        "packages": packages,
        "backends": backend_status(),
    }


def format_env(result: Mapping[str, Any]) -> str:
    lines = [
        f"hfexport {result['hfexport']} on Python {result['python']}",
        "",
        f"{'package':<16} {'pinned':<12} {'installed':<16} {'tested window':<22} status",
    ]
    for p in result["packages"]:
        lines.append(
            f"{p['package']:<16} {p['pinned'] or '-':<12} {p['installed'] or '-':<16} {p.get('window') or '-':<22} "
            f"{p['status']}"
        )
    outside = [p["package"] for p in result["packages"] if p["status"] == "OUTSIDE window"]
    if outside:
        lines.append(
            f"outside the tested window: {', '.join(outside)} (exports usually still work; docs/compatibility.md)"
        )
    lines += ["", f"{'backend':<11} {'usable':<7} {'environment':<40} decode loop"]
    for b in result["backends"]:
        env = b["environment"] if len(b["environment"]) <= 40 else b["environment"][:37] + "..."
        lines.append(f"{b['backend']:<11} {'yes' if b['usable'] else 'no':<7} {env:<40} {b['decode_loop'][:60]}")
    return "\n".join(lines)
