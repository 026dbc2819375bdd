"""Which backends exist, what each needs installed, and which the user selected. No heavy imports."""

from __future__ import annotations

import importlib.util

# The backends the judge knows itself (it has its own runtime and measured tolerances for each), and the import
# names each needs: read at plugin load without importing any implementation. Any other backend an implementation
# registers is selected by naming it (``select``): the implementation's descriptor is then read (``declare``).
BACKEND_PACKAGES: dict[str, list[str]] = {
    "dynamo": ["torch"],
    "onnx": ["torch", "onnx", "onnxscript", "onnxruntime"],
    "executorch": ["torch", "executorch"],
}
BACKENDS = tuple(BACKEND_PACKAGES)
# Backends an implementation registered beyond the judge's own: name -> (atol, rtol) of float32 outputs, as the
# implementation declares them (the judge has no measurement of its own for them).
DECLARED_TOLERANCES: dict[str, tuple[float, float]] = {}


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


def declare(implementation: str, names: list[str]) -> None:
    """Read the descriptors of ``names`` from the implementation under test (``Adapter.backends()``, which imports
    it): each becomes selectable, with the packages it needs and the float32 tolerance it declares."""
    from .adapters import resolve

    registered = resolve(implementation).backends()
    for name in names:
        described = registered.get(name)
        if described is not None:
            BACKEND_PACKAGES[name] = list(described["packages"])
            DECLARED_TOLERANCES[name] = tuple(described["tolerance"])  # type: ignore[assignment]


def known() -> list[str]:
    return list(BACKEND_PACKAGES)


def select(spec: str | None, implementation: str = "hfexport") -> list[str]:
    """``None``/``""`` -> every installed backend; ``all`` -> every backend the judge knows (all must be
    installed); ``onnx,dynamo`` -> those, in the order given, where a name the judge does not know is looked up in
    the implementation's registered backends. Raises BackendSelectionError with the fix in the message."""
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
        declare(implementation, unknown)
        unknown = [n for n in names if n not in BACKEND_PACKAGES]
    if unknown:
        raise BackendSelectionError(
            f"unknown backend(s) {unknown}; known: {known()}, 'all', or a backend {implementation} registers "
            "(hfexport.backends.register_backend)"
        )
    problems = {n: missing_packages(n) for n in names}
    problems = {n: m for n, m in problems.items() if m}
    if problems:
        detail = "; ".join(f"{n} needs {', '.join(m)}" for n, m in problems.items())
        raise BackendSelectionError(
            f"--hfexport-backend asks for {', '.join(problems)} but packages are missing: {detail}. "
            "Install them (pip install 'hfexport[all]') or leave the backend out."
        )
    return list(dict.fromkeys(names))
