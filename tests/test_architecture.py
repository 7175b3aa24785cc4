"""The house rules of STYLE.md, checked on the source: which package may import which.

Data flows one way: layout (the core) -> common -> analyzers -> iobench -> reports -> the CLI.
No library imports the CLI, the core imports nothing of ours, and no module imports itself
back through a chain of imports (an import circle), lazily or not.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FOLDERS = {
    "fcctl": REPO / "fcctl",
    "fcctl.analyzers": REPO / "analyzers",
    "fcctl.iobench": REPO / "iobench",
    "fcctl.layout": REPO / "layout",
    "fcctl.reports": REPO / "reports",
}
# What each layer may import of ours (besides itself).
ALLOWED = {
    "fcctl.layout": set(),
    "fcctl.common": {"fcctl.layout"},
    "fcctl.analyzers": {"fcctl.layout", "fcctl.common"},
    "fcctl.iobench": {"fcctl.layout", "fcctl.common", "fcctl.analyzers"},
    "fcctl.reports": {"fcctl.layout", "fcctl.common", "fcctl.analyzers", "fcctl.iobench"},
}
CLI = ("fcctl.cli", "fcctl.commands", "fcctl.errors", "fcctl.__main__")


def _modules() -> dict[str, Path]:
    mods: dict[str, Path] = {}
    for pkg, folder in FOLDERS.items():
        for path in folder.rglob("*.py"):
            rel = path.relative_to(folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            mods[".".join([pkg, *parts])] = path
    return mods


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    is_pkg = path.name == "__init__.py"
    here = name if is_pkg else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = here.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{a.name}" for a in node.names] + [base]
        for t in targets:
            # The longest known module that the target names (a name imported from a module
            # counts as the module).
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != name:
                out.add(t)
    return out


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    known = set(mods)
    return {m: _imports(m, p, known) for m, p in mods.items()}


def _layer(module: str) -> str | None:
    for layer in sorted(ALLOWED, key=len, reverse=True):
        if module == layer or module.startswith(layer + "."):
            return layer
    return None


def test_no_library_imports_the_cli_and_layers_point_one_way() -> None:
    bad = []
    for mod, deps in _graph().items():
        layer = _layer(mod)
        if layer is None:
            continue  # the CLI itself
        for dep in deps:
            dep_layer = _layer(dep)
            if dep.startswith(CLI) or dep == "fcctl":
                bad.append(f"{mod} imports the CLI ({dep})")
            elif dep_layer not in {layer, *ALLOWED[layer]}:
                bad.append(f"{mod} ({layer}) imports {dep} ({dep_layer})")
    assert not bad, "\n".join(sorted(bad))


def test_no_import_circle() -> None:
    graph = _graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                circles.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert not circles, f"import circles: {circles}"


def test_the_recommender_uses_replay_through_its_package() -> None:
    """analyzers/recommend reads the simulator through ``fcctl.analyzers.replay``'s public names
    (its ``__init__``), never a module inside it, lazy imports included."""
    replay = "fcctl.analyzers.replay"
    bad = sorted(
        f"{mod} imports {dep}"
        for mod, deps in _graph().items()
        if mod == "fcctl.analyzers.recommend" or mod.startswith("fcctl.analyzers.recommend.")
        for dep in deps
        if dep.startswith(replay + ".")
    )
    assert not bad, "\n".join(bad)
    assert replay in _graph()["fcctl.analyzers.recommend.sweep"]  # the check sees the imports


#: Inside fcctl.analyzers the subpackages point one way too (docs/architecture.md): traces ->
#: kvmodel / reuse -> replay -> recommend, with summary (the shared trace and kv objects) below
#: all but traces. What each may import of the others:
ANALYZERS = {
    "kvmodel": set(),
    "summary": set(),
    "traces": set(),
    "reuse": {"traces", "summary"},
    "replay": {"traces", "reuse", "kvmodel", "summary"},
    "recommend": {"traces", "replay"},
}
#: The one import against that order: the synthetic generator asks reuse.bounded for the memory
#: budget (a lazy import inside the function that needs it).
ANALYZERS_EXCEPTIONS = {("fcctl.analyzers.traces.synth", "fcctl.analyzers.reuse.bounded")}


def _analyzer(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["fcctl", "analyzers"] else None


def test_the_analyzers_point_one_way() -> None:
    graph = _graph()
    found = {_analyzer(m) for m in graph} - {None}
    assert found == set(ANALYZERS), found  # a new subpackage needs its row here
    bad = sorted(
        f"{mod} ({_analyzer(mod)}) imports {dep} ({_analyzer(dep)})"
        for mod, deps in graph.items()
        for dep in deps
        if (a := _analyzer(mod)) is not None
        and _analyzer(dep) not in (None, a, *ANALYZERS[a])
        and (mod, dep) not in ANALYZERS_EXCEPTIONS
    )
    assert not bad, "\n".join(bad)
    # The check sees the arrows it allows, so an empty list above means something.
    assert "fcctl.analyzers.replay" in graph["fcctl.analyzers.recommend.sweep"]
    assert all(dep in graph[mod] for mod, dep in ANALYZERS_EXCEPTIONS)


def test_no_test_module_imports_another() -> None:
    """What tests share lives in ``tests/*_helpers.py`` (or conftest.py): importing a test module
    would collect and run its tests a second time, and couples two modules' tests."""
    bad = []
    for path in sorted((REPO / "tests").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            bad += [f"{path.name} imports {n}" for n in names if n.startswith("tests.test_")]
    assert not bad, "\n".join(bad)


#: Library functions allowed to print, with the reason.
PRINTS_ALLOWED = {
    # Runs inside a signal handler, where a logging handler's lock could deadlock.
    ("fcctl.common.signals", "_say_cleaning_up"),
    # The emitted package's own command line (python -m PKG.smoke).
    ("fcctl.layout.smoke", "main"),
}


def test_no_print_in_library_code() -> None:
    """Libraries log (``logging.getLogger(__name__)``) or return text; the CLI decides where it
    goes (fcctl.errors.library_log_shown puts the log on stderr)."""
    found = []
    for name, path in _modules().items():
        if _layer(name) is None:
            continue  # the CLI, fcctl.api and fcctl.planning
        tree = ast.parse(path.read_text(), str(path))
        for func in ast.walk(tree):
            if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(func):
                is_print = (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Name)
                    and node.func.id == "print"
                )
                if is_print and (name, func.name) not in PRINTS_ALLOWED:
                    found.append(f"{name}.{func.name} (line {node.lineno})")
    assert not found, "print in library code:\n" + "\n".join(sorted(set(found)))


#: The longest function the library may hold, in lines from ``def`` to its last line.
LONGEST_FUNCTION_LINES = 100


def test_no_library_function_over_100_lines() -> None:
    """A function a reader cannot hold at once is split into named steps. fcctl/commands/ is
    left out: a command's signature declares every typer option, one per flag, and is long by
    nature while its body stays parsing, one call and rendering."""
    found = []
    for name, path in _modules().items():
        if name.startswith("fcctl.commands"):
            continue
        tree = ast.parse(path.read_text(), str(path))
        for func in ast.walk(tree):
            if isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
                assert func.end_lineno is not None
                lines = func.end_lineno - func.lineno + 1
                if lines > LONGEST_FUNCTION_LINES:
                    found.append(f"{name}.{func.name} ({path.name}:{func.lineno}): {lines} lines")
    assert found == [], f"over {LONGEST_FUNCTION_LINES} lines:\n" + "\n".join(sorted(found))


#: The parsers of command-line strings ("1,3", "64GiB", "capped:60", "256,512"): the commands
#: call them (fcctl/commands/parse.py); the API takes Python values.
STRING_PARSERS = {
    "parse_size",
    "parse_size_list",
    "parse_int_list",
    "parse_grid",
    "parse_think_time",
}


def test_the_api_parses_no_command_line_strings() -> None:
    """fcctl/api.py reaches a string parser only through its one deprecation shim, which calls
    fcctl/commands/parse.py (``_from_string``); nowhere does it split a comma list itself."""
    path = REPO / "fcctl" / "api.py"
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for func in ast.walk(tree):
        if not isinstance(func, ast.FunctionDef):
            continue
        for node in ast.walk(func):
            if isinstance(node, ast.ImportFrom):
                names = {a.name for a in node.names} & STRING_PARSERS
                found += [f"{func.name} imports {n}" for n in sorted(names)]
                if node.module == "fcctl.commands" and func.name != "_from_string":
                    found.append(f"{func.name} imports fcctl.commands")
            is_split = (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "split"
                and any(isinstance(a, ast.Constant) and a.value == "," for a in node.args)
            )
            if is_split:
                found.append(f"{func.name} splits a comma list (line {node.lineno})")
    assert not found, "\n".join(sorted(set(found)))
