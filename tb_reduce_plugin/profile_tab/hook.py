"""How tb-reduce comes to answer requests made to XProf's plugin (the Profile tab).

TensorBoard builds its routing table once: it loads every plugin (`loader.load`,
filling `context.plugin_name_to_instance` as it goes), then asks each, in the same
order, for its routes (`plugin.get_plugin_apps()`), mounted under
`/data/plugin/<name>/`. No route of another plugin's prefix can be registered, and
nothing in TensorBoard wraps a plugin's apps — so tb-reduce wraps XProf's plugin
*instance*: its `get_plugin_apps` (the routes this package fronts get a front app
that answers what is tb-reduce's and hands everything else, untouched, to XProf's
own app) and its `is_active` (a logdir with only Chrome traces still shows the
Profile tab). Nothing on disk is patched, and XProf's code runs as shipped.

Both load orders work: if XProf's plugin loaded first, tb-reduce finds it in its own
`load`; if tb-reduce loaded first, every plugin is loaded by the time TensorBoard
asks tb-reduce for its routes — which it does before asking XProf, in that order —
and `install` runs there. `--load_fast` changes only where scalars are read from,
not plugin loading.
"""

from __future__ import annotations

import logging
from importlib import metadata, util
from typing import Any, Callable, Mapping, MutableMapping, Optional

log = logging.getLogger(__name__)
PROFILE_PLUGIN = "profile"
MODES = ("auto", "on", "off")

WsgiApp = Callable[..., Any]
Front = Callable[[WsgiApp], WsgiApp]  # XProf's app for a route -> the app that fronts it


def xprof_version() -> Optional[str]:
    """The installed XProf (`tensorboard-plugin-profile` / `xprof`), or None."""
    for dist in ("xprof", "tensorboard-plugin-profile", "tensorboard_plugin_profile"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return "unknown" if util.find_spec("xprof") is not None else None


class ProfileTabHook:
    """Fronts XProf's routes with `fronts` (route -> wrapper), once XProf's plugin is found."""

    def __init__(self, mode: str, fronts: Mapping[str, Front], has_runs: Callable[[], bool]) -> None:
        self.mode = mode if mode in MODES else "auto"
        self.fronts = dict(fronts)
        self.has_runs = has_runs
        self.version = xprof_version()
        self.installed = False
        self._plugins: Optional[MutableMapping[str, Any]] = None

    @property
    def wanted(self) -> bool:
        return self.mode == "on" or (self.mode == "auto" and self.version is not None)

    def status(self) -> dict:
        if self.mode == "off":
            why = "off (--tb_reduce_profile_tab=off)"
        elif self.installed:
            why = "serving the Profile tab's Trace Viewer"
        elif self.version is None:
            why = "XProf (tensorboard-plugin-profile) is not installed"
        else:
            why = "XProf's plugin is not loaded in this TensorBoard"
        return {"mode": self.mode, "active": self.installed, "xprof": self.version, "status": why}

    def watch(self, plugins: Optional[MutableMapping[str, Any]]) -> None:
        """Remember TensorBoard's plugin table (`context.plugin_name_to_instance`) and
        install at once if XProf's plugin is in it already."""
        self._plugins = plugins
        self.install()

    def install(self) -> bool:
        """Front XProf's plugin if it is loaded (idempotent); True once fronted."""
        if self.installed or not self.wanted or self._plugins is None:
            return self.installed
        profile = self._plugins.get(PROFILE_PLUGIN)
        if profile is None:
            return False
        if getattr(profile, "_tb_reduce_fronted", False):
            self.installed = True
            return True
        original_apps = profile.get_plugin_apps
        original_active = profile.is_active
        fronts, has_runs = self.fronts, self.has_runs

        def get_plugin_apps() -> dict:
            apps = dict(original_apps())
            for route, front in fronts.items():
                if route in apps:
                    apps[route] = front(apps[route])
            return apps

        def is_active() -> bool:
            try:
                if original_active():
                    return True
            except Exception:  # XProf's own check failing must not hide tb-reduce's runs
                log.exception("tb_reduce: XProf's is_active failed")
            try:
                return bool(has_runs())
            except Exception:
                log.exception("tb_reduce: listing runs for the Profile tab failed")
                return False

        profile.get_plugin_apps = get_plugin_apps  # instance attributes: XProf's class is untouched
        profile.is_active = is_active
        profile._tb_reduce_fronted = True
        self.installed = True
        log.info("tb_reduce: answering the Profile tab's Trace Viewer (XProf %s)", self.version)
        return True
