"""STYLE.md 14: a subsystem is used through its public names; no ``_private`` name crosses a module.

The rule, as checked here on the source of fcctl/, analyzers/, iobench/, layout/ and reports/
(under their import names, ``fcctl.analyzers...`` and so on):

1. A name with a leading underscore (not a ``__dunder__``) belongs to the module that defines
   it. No other module imports it (``from M import _x``, ``from . import _x``) or reads it off
   the module (``M._x``, ``fcctl.x.y._x``). That holds inside one package too: a sibling, the
   package's ``__init__`` or a subpackage is another module. A helper two modules need gets a
   public name in its home module (it may stay out of the package's ``__init__``).
2. A module whose own name has a leading underscore (``readers/_common.py``) is private to its
   package: the modules of that package (and of its subpackages) import its public names; no
   module outside does.

Lazy imports inside functions count as well. Class attributes (``obj._field``) are not
module names and are not checked here.
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

# Crossings that analyzers/replay and analyzers/recommend still make (into, out of or inside
# them), left for the rewrite of those packages, which removes each one: (importing module,
# module the name belongs to, name). Nothing else may be added here; a crossing elsewhere is
# fixed by giving the helper a public name.
ALLOWED: set[tuple[str, str, str]] = set()


def _modules() -> dict[str, Path]:
    mods: dict[str, Path] = {}
    for pkg, folder in FOLDERS.items():
        for path in folder.rglob("*.py"):
            if pkg == "fcctl" and path.relative_to(folder).parts[0] in {
                "analyzers",
                "iobench",
                "layout",
                "reports",
            }:
                continue  # the symlinks to the folders scanned under their own entry
            rel = path.relative_to(folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            mods[".".join([pkg, *parts])] = path
    return mods


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _private_package(module: str) -> str | None:
    """The package a private module (one with a ``_name`` component) is private to."""
    parts = module.split(".")
    for i, part in enumerate(parts):
        if _is_private(part):
            return ".".join(parts[:i])
    return None


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _longest_known(dotted: str, known: set[str]) -> str | None:
    while dotted and dotted not in known:
        dotted = dotted.rpartition(".")[0]
    return dotted or None


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return None if base is None else f"{base}.{node.attr}"
    return None


def _crossings(name: str, path: Path, known: set[str]) -> set[tuple[str, str, str]]:
    """(importer, owner module, private name or private module) for each crossing in one file."""
    is_pkg = path.name == "__init__.py"
    here = name if is_pkg else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(), str(path))
    out: set[tuple[str, str, str]] = set()
    bound: dict[str, str] = {}  # local name -> our module it is bound to

    def use_module(module: str) -> None:
        package = _private_package(module)
        if package is not None and not _inside(name, package):
            out.add((name, module.rpartition(".")[0], module.rpartition(".")[2]))

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] != "fcctl":
                    continue
                use_module(alias.name)
                if alias.asname:
                    bound[alias.asname] = alias.name
                else:
                    bound[alias.name.split(".")[0]] = alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = here.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            if base.split(".")[0] != "fcctl":
                continue
            use_module(base)
            for alias in node.names:
                target = f"{base}.{alias.name}"
                if target in known:  # a submodule
                    use_module(target)
                    bound[alias.asname or alias.name] = target
                elif _is_private(alias.name) and base != name:
                    out.add((name, base, alias.name))
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not _is_private(node.attr):
            continue
        dotted = _dotted(node.value)
        if dotted is None:
            continue
        head, _, rest = dotted.partition(".")
        if head not in bound:
            continue
        full = ".".join(filter(None, [bound[head], rest]))
        if full in known and full != name:
            out.add((name, full, node.attr))
    return out


def _all_crossings() -> set[tuple[str, str, str]]:
    mods = _modules()
    known = set(mods)
    found: set[tuple[str, str, str]] = set()
    for mod, path in mods.items():
        found |= _crossings(mod, path, known)
    return found


def test_no_private_name_crosses_a_module() -> None:
    new = sorted(_all_crossings() - ALLOWED)
    assert not new, "private names used outside their module:\n" + "\n".join(
        f"{importer} uses {owner}.{priv}" for importer, owner, priv in new
    )


def test_the_allow_list_holds_only_live_replay_and_recommend_crossings() -> None:
    stale = sorted(ALLOWED - _all_crossings())
    assert not stale, f"no longer crossing, drop from ALLOWED: {stale}"
    outside = [
        c
        for c in ALLOWED
        if not any(
            _inside(m, p)
            for m in c[:2]
            for p in ("fcctl.analyzers.replay", "fcctl.analyzers.recommend")
        )
    ]
    assert not outside, f"ALLOWED is only for analyzers/replay and analyzers/recommend: {outside}"


def test_the_scan_finds_each_kind_of_crossing(tmp_path: Path) -> None:
    known = {"fcctl.a", "fcctl.a.b", "fcctl.a.c", "fcctl.a._p", "fcctl.d"}
    src = tmp_path / "c.py"
    src.write_text(
        "from fcctl.a.b import _x, y\n"
        "from . import _z\n"
        "from ._p import helper\n"
        "import fcctl.a.b as bee\n"
        "from fcctl.a import b\n"
        "import fcctl.a.b\n"
        "def f():\n"
        "    return bee._w, b._v, fcctl.a.b._u, b.__doc__, _own\n"
        "_own = 1\n"
    )
    assert _crossings("fcctl.a.c", src, known) == {
        ("fcctl.a.c", "fcctl.a.b", "_x"),
        ("fcctl.a.c", "fcctl.a", "_z"),
        ("fcctl.a.c", "fcctl.a.b", "_w"),
        ("fcctl.a.c", "fcctl.a.b", "_v"),
        ("fcctl.a.c", "fcctl.a.b", "_u"),
    }  # ._p is private to fcctl.a, and fcctl.a.c is inside it
    outsider = tmp_path / "d.py"
    outsider.write_text("from fcctl.a._p import helper\nimport fcctl.a._p\n")
    assert _crossings("fcctl.d", outsider, known) == {("fcctl.d", "fcctl.a", "_p")}
