"""The storage core's package loads its public names lazily (layout/__init__.py, PEP 562).

What static tools see (the imports under TYPE_CHECKING), what ``__getattr__`` loads (_HOMES)
and ``__all__`` must name the same things, and each name must be the defining module's object.
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import fcctl.layout

INIT = Path(__file__).resolve().parents[1] / "layout" / "__init__.py"


def _type_checking_imports() -> dict[str, str]:
    tree = ast.parse(INIT.read_text())
    out: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for imp in node.body:
                assert isinstance(imp, ast.ImportFrom) and imp.level == 1
                for alias in imp.names:
                    out[alias.asname or alias.name] = f".{imp.module}"
    return out


def _lazy_table() -> dict[str, str]:
    for node in ast.parse(INIT.read_text()).body:
        if isinstance(node, ast.AnnAssign) and ast.unparse(node.target) == "_HOMES":
            assert node.value is not None
            table: dict[str, str] = ast.literal_eval(node.value)
            return table
    raise AssertionError("no _HOMES table in layout/__init__.py")


def test_static_names_lazy_names_and_all_agree() -> None:
    static = _type_checking_imports()
    assert static == _lazy_table()
    assert sorted(static) == sorted(fcctl.layout.__all__)


def test_each_name_is_its_home_modules_object() -> None:
    for name, home in _type_checking_imports().items():
        module = importlib.import_module(home, "fcctl.layout")
        assert getattr(fcctl.layout, name) is getattr(module, name), name
    assert set(fcctl.layout.__all__) <= set(dir(fcctl.layout))


def test_a_light_module_does_not_load_numpy() -> None:
    probe = (
        "import sys; import fcctl.layout.geometry, fcctl.layout.errors; "
        "print('numpy' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_an_unknown_name_is_an_attribute_error() -> None:
    try:
        fcctl.layout.no_such_name  # noqa: B018
    except AttributeError as e:
        assert "no_such_name" in str(e)
    else:
        raise AssertionError("no AttributeError")
