"""`tensorboard` with the XProf and tb-reduce plugins loaded in a chosen order.

    python tests/tensorboard_with_order.py ORDER [tensorboard flags…]

ORDER: `xprof-first`, `tb_reduce-first` (TensorBoard's own loaders, then the two
plugins in that order) or `xprof-only` (tb-reduce not loaded: XProf alone, the
baseline its answers are compared with). TensorBoard otherwise loads entry points in
whatever order the installed packages' metadata gives, so tests pin both orders here.
"""

from __future__ import annotations

import sys

from tensorboard import default, program


def loaders(order: str) -> list:
    from xprof.profile_plugin_loader import ProfilePluginLoader

    from tb_reduce_plugin.serve.plugin import TraceReduceLoader

    dynamic = [p for p in default.get_dynamic_plugins() if p not in (TraceReduceLoader, ProfilePluginLoader)
               and not isinstance(p, (TraceReduceLoader, ProfilePluginLoader))]
    ours = {"xprof-first": [ProfilePluginLoader(), TraceReduceLoader()],
            "tb_reduce-first": [TraceReduceLoader(), ProfilePluginLoader()],
            "xprof-only": [ProfilePluginLoader()]}[order]
    return default.get_static_plugins() + dynamic + ours


def main() -> int:
    order, argv = sys.argv[1], sys.argv[2:]
    tb = program.TensorBoard(plugins=loaders(order))
    tb.configure(["tensorboard", *argv])
    return tb.main()


if __name__ == "__main__":
    sys.exit(main())
