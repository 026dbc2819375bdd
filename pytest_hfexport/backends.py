"""Which backends exist, what each needs installed, and which the user selected. No heavy imports."""

from __future__ import annotations

import importlib.util

# Backend -> import names it needs. The table is the one place a new backend's requirements go.
BACKEND_PACKAGES: dict[str, list[str]] = {
    "dynamo": ["torch"],
    "onnx": ["torch", "onnx", "onnxscript", "onnxruntime"],
    "executorch": ["torch", "executorch"],
}
BACKENDS = tuple(BACKEND_PACKAGES)


def missing_packages(backend: str) -> list[str]:
    out = []
    for package in BACKEND_PACKAGES[backend]:
        try:
            found = importlib.util.find_spec(package) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            out.append(package)
    return out


def available() -> list[str]:
    """Every known backend whose packages are installed (found, not imported)."""
    return [b for b in BACKENDS if not missing_packages(b)]


class BackendSelectionError(ValueError):
    """The selection names an unknown backend, or one whose packages are missing."""


def select(spec: str | None) -> list[str]:
    """``None``/``""`` -> every installed backend; ``all`` -> every known one (all must be installed);
    ``onnx,dynamo`` -> those, in the order given. Raises BackendSelectionError with the fix in the message."""
    if spec is None or not spec.strip():
        chosen = available()
        if not chosen:
            raise BackendSelectionError("no backend is installed: pip install torch (dynamo), onnx, executorch")
        return chosen
    names = [n.strip() for n in spec.split(",") if n.strip()]
    if names == ["all"]:
        names = list(BACKENDS)
    unknown = [n for n in names if n not in BACKEND_PACKAGES]
    if unknown:
        raise BackendSelectionError(f"unknown backend(s) {unknown}; known: {list(BACKENDS)} or 'all'")
    problems = {n: missing_packages(n) for n in names}
    problems = {n: m for n, m in problems.items() if m}
    if problems:
        detail = "; ".join(f"{n} needs {', '.join(m)}" for n, m in problems.items())
        raise BackendSelectionError(
            f"--hfexport-backend asks for {', '.join(problems)} but packages are missing: {detail}. "
            "Install them (pip install 'hfexport[all]') or leave the backend out."
        )
    return list(dict.fromkeys(names))
