"""No module of the five packages imports, through any chain, a module that imports it back.

Every import counts, wherever it is written: at the top, inside a function (a deferred import hides a cycle from
the interpreter, not from the design) or under ``TYPE_CHECKING``. grimp reads the imports; a cycle is an import
``a -> b`` with a chain back from ``b`` to ``a``.
"""

from __future__ import annotations

from pathlib import Path

import grimp
import pytest

PACKAGES = ("muster_mesh", "muster_a2a", "muster_dispatch", "muster_client", "muster_api")


def cycles(*packages: str) -> list[list[str]]:
    """One closed chain per import that starts a cycle, shortest first: ``[a, b, ..., a]``."""
    graph = grimp.build_graph(*packages, exclude_type_checking_imports=False, cache_dir=None)
    found: list[list[str]] = []
    for importer in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(importer)):
            back = graph.find_shortest_chain(importer=imported, imported=importer)
            if back is not None:
                found.append([importer, *back])
    return sorted(found, key=len)


def test_no_module_cycle_in_the_five_packages() -> None:
    found = cycles(*PACKAGES)
    assert not found, "import cycles:\n" + "\n".join(" -> ".join(chain) for chain in found)


def test_the_check_sees_deferred_and_type_checking_imports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The check itself, on a package whose only cycles are the kinds the interpreter lets through.
    package = tmp_path / "cyclic_probe"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "base.py").write_text("def pick():\n    from cyclic_probe.sub import Sub\n    return Sub\n")
    (package / "sub.py").write_text("from cyclic_probe.base import pick\nclass Sub: ...\n")
    (package / "state.py").write_text("from cyclic_probe.work import work\n")
    (package / "work.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from cyclic_probe.state import State\n"
        "def work(): ...\n"
    )
    (package / "alone.py").write_text("from cyclic_probe.sub import Sub\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    found = {frozenset(chain) for chain in cycles("cyclic_probe")}
    assert found == {
        frozenset({"cyclic_probe.base", "cyclic_probe.sub"}),
        frozenset({"cyclic_probe.state", "cyclic_probe.work"}),
    }
