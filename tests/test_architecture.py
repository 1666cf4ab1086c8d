"""The house rules of app/, read from the source with ``ast`` (no imports, milliseconds): app.engine imports
nothing from app.models, app.lab, app.ui or other top-level app modules; app.lab nothing from app.ui; app.models
nothing from app.lab or app.ui; and no cycle between the packages."""

from __future__ import annotations

import ast
from pathlib import Path

APP = Path(__file__).resolve().parents[1] / "app"
PACKAGES = ("engine", "models", "lab", "ui")


def _unit(module: str) -> str:
    """The package (app.engine, ...) or top-level module (app.offload, ...) a dotted name belongs to."""
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else module


def _imports(path: Path) -> set[str]:
    """Every app.* module a source file imports, at module level or inside functions."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("app.")}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "app":  # from app import paths, offload
                found |= {f"app.{a.name}" for a in node.names}
            elif node.module.startswith("app."):
                found.add(node.module)
    return found


def graph() -> dict[str, set[str]]:
    """{unit: units it imports} over app/**/*.py (a unit: app.engine, app.models, ..., or app.offload etc.)."""
    edges: dict[str, set[str]] = {}
    for path in APP.rglob("*.py"):
        rel = path.relative_to(APP.parent).with_suffix("")
        unit = _unit(".".join(p for p in rel.parts if p != "__init__"))
        edges.setdefault(unit, set()).update(u for u in map(_unit, _imports(path)) if u != unit)
    return edges


def _cycle(edges: dict[str, set[str]]) -> list[str]:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        state[node] = 2
        stack.pop()
        return []

    for node in sorted(edges):
        if node not in state and (found := visit(node)):
            return found
    return []


def test_engine_imports_only_itself():
    assert graph()["app.engine"] == set()


def test_lab_and_models_do_not_import_the_ui():
    edges = graph()
    assert not edges["app.lab"] & {"app.ui"}
    assert not edges["app.models"] & {"app.ui", "app.lab"}


def test_no_cycle_between_packages_and_modules():
    assert _cycle(graph()) == []


def test_the_graph_sees_every_package():
    edges = graph()
    assert set(f"app.{p}" for p in PACKAGES) <= set(edges)
    assert "app.engine" in edges["app.lab"] and "app.lab" in edges["app.ui"]
