"""The house rules of app/, read from the source with ``ast`` (no imports, milliseconds).

- Imports flow one way: engine <- models <- lab <- service <- {server, ui} <- cli. The engine imports nothing
  else from app; server and ui never import each other (the command line hands the server's routes to the UI).
  The chat format (app/chat) sits beside the server and imports the engine only.
- Inside the engine, rooms flow one way: llama <- decoding <- control <- drafters <- loop <- remote <- pair, with
  a few shared leaves (errors, limits, names, events, summary, stats, target) that import only llama and decoding.
  So the drafters and the controller never import the loop, and llama/ never imports a drafter.
- Gradio only in app/ui; FastAPI, Starlette and uvicorn (HTTP routes) only in app/server.
- No circle between any two modules; no module over 400 lines.
- No error matched by its class name or by its message's text (``app.errors`` dispatches on the base class
  and its fields).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

APP = Path(__file__).resolve().parents[1] / "app"
PACKAGES = ("engine", "models", "lab", "service", "server", "ui", "cli", "chat")
MAX_LINES = 400
# What each unit may import (besides itself). The top-level modules: numfmt is a leaf; paths and errors sit on
# the engine's error base; testing is the test suite's helper (the ``test`` command's too).
ALLOWED: dict[str, set[str]] = {
    "app.paths": {"app.engine"},  # the error base only (OutputPathError)
    "app.numfmt": set(),
    "app.engine": set(),
    "app.errors": {"app.engine", "app.paths"},
    "app.testing": {"app.engine", "app.paths"},
    "app.models": {"app.engine", "app.paths"},
    "app.lab": {"app.engine", "app.models", "app.paths", "app.numfmt"},
    "app.chat": {"app.engine"},
}
ALLOWED["app.service"] = ALLOWED["app.lab"] | {"app.lab", "app.errors"}
ALLOWED["app.server"] = ALLOWED["app.service"] | {"app.service", "app.chat"}
ALLOWED["app.ui"] = ALLOWED["app.service"] | {"app.service"}
ALLOWED["app.cli"] = set(ALLOWED) | {"app.service", "app.server", "app.ui", "app.testing"}
# The engine's rooms, lowest first: each may import the rooms before it and the shared leaves.
ENGINE_ROOMS = ("llama", "decoding", "control", "drafters", "loop", "remote", "pair")
ENGINE_LEAVES = {"errors", "limits", "names", "events", "summary", "stats", "target"}
ONLY_IN = {"gradio": "app.ui", "fastapi": "app.server", "starlette": "app.server", "uvicorn": "app.server"}


def _sources() -> list[Path]:
    return sorted(APP.rglob("*.py"))


def _module(path: Path) -> str:
    rel = path.relative_to(APP.parent).with_suffix("")
    return ".".join(p for p in rel.parts if p != "__init__")


def _unit(module: str) -> str:
    """The package (app.engine, ...) or top-level module (app.errors, ...) a dotted name belongs to."""
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else module


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), str(path))


def _imports(path: Path) -> set[str]:
    """Every module a source file imports, at module level or inside functions (``from app import x`` as
    app.x; ``from app.pkg import mod`` as app.pkg.mod when mod is a module)."""
    found: set[str] = set()
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            subs = {f"{node.module}.{a.name}" for a in node.names}
            modules = {s for s in subs if s.startswith("app.") and _exists(s)}
            found |= modules if len(modules) == len(subs) else modules | {node.module}
    return found


def _exists(module: str) -> bool:
    rel = Path(*module.split("."))
    return (APP.parent / rel.with_suffix(".py")).is_file() or (APP.parent / rel / "__init__.py").is_file()


def module_graph() -> dict[str, set[str]]:
    """{app module: the app modules it imports}."""
    return {_module(p): {m for m in _imports(p) if m.startswith("app.") and _exists(m)} - {_module(p)}
            for p in _sources() if _module(p) != "app"}  # app/__init__.py: the package's face


def graph() -> dict[str, set[str]]:
    """{unit: units it imports} (a unit: app.engine, app.models, ..., or a top-level module such as app.errors)."""
    edges: dict[str, set[str]] = {}
    for module, imported in module_graph().items():
        unit = _unit(module)
        edges.setdefault(unit, set()).update(u for u in map(_unit, imported) if u != unit)
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


def test_the_graph_sees_every_package():
    edges = graph()
    assert {f"app.{p}" for p in PACKAGES} <= set(edges)
    assert "app.engine" in edges["app.models"] and "app.service" in edges["app.server"]
    assert "app.service" in edges["app.ui"] and "app.ui" in edges["app.cli"]


def test_engine_imports_only_itself():
    assert graph()["app.engine"] == set()


def _room(module: str) -> str:
    """The engine room of an app.engine module: its sub-package, or the top-level module's own name."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 else ""


def test_engine_rooms_flow_one_way():
    wrong = []
    for module, imported in module_graph().items():
        if not module.startswith("app.engine."):
            continue
        room = _room(module)
        for other in (_room(i) for i in imported if i.startswith("app.engine.")):
            if other == room or other in ENGINE_LEAVES and room not in ENGINE_LEAVES:
                continue
            low = {"llama", "decoding"} | ENGINE_LEAVES if room in ENGINE_LEAVES else set(
                ENGINE_ROOMS[:ENGINE_ROOMS.index(room)] if room in ENGINE_ROOMS else ())
            if other not in low:
                wrong.append(f"{module} imports {other}")
    assert wrong == []
    rooms = {_room(m) for m in module_graph() if m.startswith("app.engine.")}
    assert rooms <= set(ENGINE_ROOMS) | ENGINE_LEAVES, "a new engine room or leaf: give it its place"


def test_the_drafters_and_the_controller_never_import_the_loop_and_llama_never_a_drafter():
    edges = module_graph()
    for module, imported in ((m, i) for m, i in edges.items() if m.startswith("app.engine.")):
        if _room(module) in ("drafters", "control"):
            assert "app.engine.loop" not in imported and "app.engine.pair" not in imported, module
        if _room(module) == "llama":
            assert not any(_room(i) in ("drafters", "control", "decoding") for i in imported
                           if i.startswith("app.engine.")), module


def test_imports_flow_engine_models_lab_service_then_server_or_ui_then_cli():
    wrong = {unit: sorted(imported - ALLOWED[unit]) for unit, imported in graph().items()
             if unit in ALLOWED and imported - ALLOWED[unit]}
    assert wrong == {}
    assert set(graph()) <= set(ALLOWED), "a new top-level unit: give it its place in ALLOWED"


def test_server_and_ui_never_import_each_other():
    edges = graph()
    assert "app.ui" not in edges["app.server"] and "app.server" not in edges["app.ui"]


def test_gradio_only_in_the_ui_and_http_only_in_the_server():
    wrong = []
    for path in _sources():
        unit = _unit(_module(path))
        for module in _imports(path):
            owner = ONLY_IN.get(module.split(".")[0])
            if owner and unit != owner:
                wrong.append(f"{_module(path)} imports {module}")
    assert wrong == []


def test_no_circle_between_modules_or_packages():
    assert _cycle(module_graph()) == []
    assert _cycle(graph()) == []


def test_no_module_over_400_lines():
    long = {_module(p): n for p in _sources() if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert long == {}


def _names_a_class(node: ast.AST) -> bool:
    """``x.__name__`` of anything but the module's own ``__name__``."""
    return isinstance(node, ast.Attribute) and node.attr == "__name__"


def _class_names(node: ast.AST) -> bool:
    """A string that names an error class ("ContextFullError"), or a tuple, list or set of them."""
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_class_names(e) for e in node.elts)
    return (isinstance(node, ast.Constant) and isinstance(node.value, str)
            and re.fullmatch(r"[A-Z]\w*(Error|Exception|Refused|Pair|Cancelled)", node.value) is not None)


def _is_str_call(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "str"


def error_matching(tree: ast.AST) -> list[int]:
    """Lines that match an error by its class name (``type(e).__name__ == …``, ``cls.__name__ in HINTS``,
    ``HINTS[cls.__name__]``) or by its message (``"…" in str(e)``)."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(_names_a_class(o) or _class_names(o) for o in operands):
                lines.append(node.lineno)
            if any(isinstance(op, (ast.In, ast.NotIn)) and _is_str_call(right)
                   for op, right in zip(node.ops, node.comparators)):
                lines.append(node.lineno)
        elif isinstance(node, ast.Subscript) and _names_a_class(node.slice):
            lines.append(node.lineno)
        elif isinstance(node, ast.Dict) and any(k is not None and _class_names(k) for k in node.keys):
            lines.append(node.lineno)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
              and node.args and _names_a_class(node.args[0])):
            lines.append(node.lineno)
    return lines


def test_no_error_is_matched_by_class_name_or_message_text():
    found = {_module(p): lines for p in _sources() if (lines := error_matching(_tree(p)))}
    assert found == {}


def test_the_error_check_sees_the_old_ways():
    old = ('name = type(exc).__name__\nif name in ("ContextFullError",): pass\n'
           'if HINTS[cls.__name__]: pass\nif "no pair is loaded" in str(exc): pass\n'
           'cls = {c.__name__: c for c in classes}.get(type(e).__name__)\n')
    assert error_matching(ast.parse(old)) == [2, 3, 4, 5]
    assert error_matching(ast.parse('HINTS = {"ContextFullError": "shorten the prompt"}')) == [1]
    assert error_matching(ast.parse('if type(e).__name__ == "X": pass')) == [1]
