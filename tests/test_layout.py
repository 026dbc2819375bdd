"""The layers stay visible: small modules, no import cycles, and a judge that imports nothing it judges.

Read from the source text (no imports), so a violation fails here before it shows up as an import-order bug.
Imports under ``if TYPE_CHECKING:`` are left out: they never run.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LIBRARY = ("hfexport", "pytest_hfexport")
MAX_LINES = 400


def _modules(root: Path, packages: tuple[str, ...]) -> dict[str, Path]:
    found = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _imported(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    """Modules of ``known`` that ``module`` imports anywhere in its text (function bodies included)."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING":
            node.body = []
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names if alias.name in known)
        elif isinstance(node, ast.ImportFrom):
            parts = package[: len(package) - node.level + 1] if node.level else []
            base = ".".join(parts + ([node.module] if node.module else []))
            submodules = {f"{base}.{alias.name}" for alias in node.names} & set(known)
            out |= submodules
            if len(submodules) < len(node.names) and base in known:
                out.add(base)
    out.discard(module)
    return out


def import_cycles(root: Path, packages: tuple[str, ...]) -> list[list[str]]:
    """Strongly connected groups of more than one module in the import graph of ``packages``."""
    known = _modules(root, packages)
    graph = {module: _imported(module, path, known) for module, path in known.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in graph[module]:
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                cycles.append(sorted(group))

    for module in graph:
        if module not in index:
            visit(module)
    return cycles


def test_no_import_cycle_in_the_library_or_the_plugin():
    assert import_cycles(ROOT, LIBRARY) == []


def test_the_cycle_finder_sees_a_cycle(tmp_path):
    """The rule above could not fail if the finder missed relative and in-function imports."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from .b import thing\n")
    (package / "b.py").write_text("def thing():\n    from . import c\n")
    (package / "c.py").write_text("import pkg.a\n")
    (package / "d.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import a\n")
    assert import_cycles(tmp_path, ("pkg",)) == [["pkg.a", "pkg.b", "pkg.c"]]


# Every folder of the repository's own Python: the library, the judge, the suite, its tests, benchmarks, examples.
SOURCES = ("hfexport", "pytest_hfexport", "conformance", "tests", "benchmarks", "examples")


@pytest.mark.parametrize("package", SOURCES)
def test_no_module_above_the_size_limit(package):
    long = {
        str(path.relative_to(ROOT)): n
        for path in (ROOT / package).rglob("*.py")
        if (n := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"modules above {MAX_LINES} lines (split them by job): {long}"


def test_the_suite_imports_nothing_from_the_implementation():
    """conformance/ judges through the adapter; a hfexport import would let hfexport judge itself."""
    offenders = []
    for path in sorted((ROOT / "conformance").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            if any(name == "hfexport" or name.startswith("hfexport.") for name in names):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, f"conformance imports hfexport at {offenders}"


def _imports_of(package: str, forbidden: str) -> list[str]:
    offenders = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            if any(name == forbidden or name.startswith(f"{forbidden}.") for name in names):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return offenders


@pytest.mark.parametrize("judge", ["pytest_hfexport", "conformance"])
def test_the_library_imports_nothing_of_its_judges(judge):
    """The library is the ground floor: the plugin's `export --check` reaches the CLI by entry point
    (hfexport/cli/checkers.py), the runtimes keep their own dtype tables (hfexport/runtime/dtypes.py)."""
    assert _imports_of("hfexport", judge) == [], f"hfexport imports {judge}"


DOC_MAX_LINES, DOCS_MAX_TOTAL = 250, 1200  # issue 39: each page says what is true now, briefly


def _over_budget(pages: dict[str, int]) -> list[str]:
    """The doc pages over their budget, and the folder's total when that is over."""
    over = [f"{name}: {n} lines > {DOC_MAX_LINES}" for name, n in pages.items() if n > DOC_MAX_LINES]
    total = sum(pages.values())
    return over + ([f"docs/ total {total} lines >= {DOCS_MAX_TOTAL}"] if total >= DOCS_MAX_TOTAL else [])


def test_docs_stay_brief():
    pages = {p.name: len(p.read_text().splitlines()) for p in sorted((ROOT / "docs").glob("*.md"))}
    assert pages and not _over_budget(pages), _over_budget(pages)


def test_the_docs_budget_sees_a_long_page_and_a_long_folder():
    assert _over_budget({"a.md": 251}) == ["a.md: 251 lines > 250"]
    assert _over_budget({f"{i}.md": 240 for i in range(5)}) == ["docs/ total 1200 lines >= 1200"]
    assert _over_budget({f"{i}.md": 250 for i in range(4)} | {"e.md": 199}) == []
