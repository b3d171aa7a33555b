"""The package's layers hold (README, "Layout"): read from the source, every import of a
module names only layers at or below its own, so no cycle between layers can come back."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "tb_reduce_plugin"
# What each part of the package may not import (its own layer and those below are fine).
FORBIDDEN = {
    "formats": {"reduce", "index", "serve", "query", "waveforms", "live", "multihost", "profile_tab", "cli"},
    "model": {"formats", "reduce", "index", "serve", "query", "waveforms", "live", "multihost", "profile_tab", "cli",
              "budget.py"},
    "native.py": {"model", "formats", "reduce", "index", "serve", "query", "waveforms", "live", "multihost",
                  "profile_tab"},
    "reduce": {"serve", "live", "multihost", "profile_tab", "cli"},
    "index": {"serve", "live", "multihost", "profile_tab", "cli"},
    "query": {"serve", "live", "multihost", "profile_tab", "cli"},
    "waveforms": {"serve", "live", "multihost", "profile_tab", "cli"},
    "live": {"serve", "multihost", "profile_tab"},
}


def imported_parts(path: Path) -> set[str]:
    """The top-level parts of the package (`reduce`, `model`, `native.py`, ...) a module imports."""
    rel = path.relative_to(PACKAGE)
    package = list(rel.parts[:-1])
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - (node.level - 1)] if node.level > 1 else package
                target = base + (node.module.split(".") if node.module else [])
                names = [target + [a.name] for a in node.names] if not node.module else [target]
            elif node.module and node.module.startswith("tb_reduce_plugin"):
                names = [node.module.split(".")[1:]]
            else:
                continue
            for parts in names:
                if parts:
                    found.add(parts[0] if (PACKAGE / parts[0]).is_dir() else parts[0] + ".py")
    return found


def test_no_module_imports_a_layer_above_its_own() -> None:
    broken = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        part = rel.parts[0]
        banned = FORBIDDEN.get(part, set())
        for hit in imported_parts(path) & {b if (PACKAGE / b).is_dir() or b.endswith(".py") else b + ".py"
                                           for b in banned}:
            broken.append(f"{rel} imports {hit}")
    assert not broken, broken
    assert imported_parts(PACKAGE / "live" / "watch.py") >= {"formats"}  # the walk reads the imports it should
