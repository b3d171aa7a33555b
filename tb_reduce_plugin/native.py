"""The native scanning core (`_scan`, built from `_scan.c` by setup.py) when it is there.

Every native path has a pure-Python twin giving the same results byte for byte; the
native one is a speed-up, never a requirement. `TB_REDUCE_NATIVE=0` turns it off (CI
runs the suite both ways), and so does a machine without a compiler, where the
extension was never built.
"""

from __future__ import annotations

import os
from types import ModuleType
from typing import Optional


def _load() -> Optional[ModuleType]:
    """The built extension; `TB_REDUCE_SCAN_PATH` names another build of it (the
    AddressSanitizer build of `make asan`) without replacing the installed one."""
    path = os.environ.get("TB_REDUCE_SCAN_PATH")
    if path:
        import importlib.machinery
        import importlib.util

        loader = importlib.machinery.ExtensionFileLoader("tb_reduce_plugin._scan", path)
        spec = importlib.util.spec_from_file_location("tb_reduce_plugin._scan", path, loader=loader)
        assert spec is not None
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
        return module
    try:
        from . import _scan
    except ImportError:  # not built (no compiler): the pure-Python paths do everything
        return None
    return _scan


_module = _load()


def scanner_module() -> Optional[ModuleType]:
    """The extension, unless it is missing or switched off (read on each call, so a
    test or a process can switch it)."""
    if _module is None or os.environ.get("TB_REDUCE_NATIVE", "1").strip() == "0":
        return None
    return _module


def _load_guard() -> Optional[ModuleType]:
    try:
        from . import _guard
    except ImportError:  # not built: mapped files are read unguarded (see `mapped`)
        return None
    return _guard


_guard_module = _load_guard()


def guard_module() -> Optional[ModuleType]:
    """The SIGBUS guard of mapped files (`_guard.c`), under the same switch as the scanner."""
    if _guard_module is None or os.environ.get("TB_REDUCE_NATIVE", "1").strip() == "0":
        return None
    return _guard_module


def available() -> bool:
    """Whether the extension was built (whatever the switch says)."""
    return _module is not None
