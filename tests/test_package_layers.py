"""The package's layers hold (README, "Layout"): read from the source, every import of a
module names only layers at or below its own, so no cycle between layers can come back;
and within `reduce/`, the plan's parts sit below the plan."""

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
    "compare": {"serve", "live", "multihost", "profile_tab", "cli"},
    "export": {"serve", "live", "multihost", "profile_tab", "cli", "compare"},
    "live": {"serve", "multihost", "profile_tab"},
}

# Within reduce/: the plan (`plan.py`) applies the rules of each kind of event, which sit below
# it and import neither it nor one another (`summaries`, `points`, `flows`); what they share of
# a table (`shared`), the view's bucket grid (`buckets`) and the fold's per-slice steps
# (`fold_steps`) sit below them all.
REDUCE_FORBIDDEN = {
    "summaries.py": {"plan", "points", "flows"},
    "points.py": {"plan", "summaries", "flows"},
    "flows.py": {"plan", "summaries", "points"},
    "shared.py": {"plan", "summaries", "points", "flows", "buckets"},
    "buckets.py": {"plan", "summaries", "points", "flows", "shared"},
    "fold_steps.py": {"plan", "summaries", "points", "flows", "shared", "buckets"},
}


def imported_modules(path: Path) -> set[tuple[str, ...]]:
    """The modules of the package a module imports from, as paths in it (`("reduce", "plan")`):
    `from .plan import x` and `from . import plan` alike."""
    package = list(path.relative_to(PACKAGE).parts[:-1])
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
            found.update(tuple(parts) for parts in names if parts)
    return found


def imported_parts(path: Path) -> set[str]:
    """The top-level parts of the package (`reduce`, `model`, `native.py`, ...) a module imports."""
    return {parts[0] if (PACKAGE / parts[0]).is_dir() else parts[0] + ".py" for parts in imported_modules(path)}


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


def test_the_plans_parts_import_neither_the_plan_nor_one_another() -> None:
    broken = []
    for name, banned in REDUCE_FORBIDDEN.items():
        for parts in imported_modules(PACKAGE / "reduce" / name):
            if parts[0] == "reduce" and len(parts) > 1 and parts[1] in banned:
                broken.append(f"reduce/{name} imports reduce/{parts[1]}.py")
    assert not broken, broken
    parts = {("reduce", m) for m in ("summaries", "points", "flows", "shared", "buckets")}
    assert imported_modules(PACKAGE / "reduce" / "plan.py") >= parts  # the walk reads the imports it should
