"""What the index suites share (tests/index/, tests/reduce/test_window_plans.py, the block
store's and the scanner's tests): the corpus's Chrome traces, a reduction as bytes (or
several windows'), where a trace's stored index lies, and a
manifest's checksum made to fit a file a test changed on purpose."""

from __future__ import annotations

import io
import os
import shutil
from pathlib import Path

from conftest import ROOT

from tb_reduce_plugin.formats.sources import FileIdentity
from tb_reduce_plugin.index import store as store_module
from tb_reduce_plugin.index.store import IndexStore, index_digest
from tb_reduce_plugin.reduce.pipeline import reduce_index

CORPUS = ROOT.parent / "shared" / "corpus"


def chrome_traces() -> list[Path]:
    """Every Chrome trace of the corpus that parses (the one rocprof file is not a trace)."""
    if not CORPUS.is_dir():
        return []
    return sorted(p for p in CORPUS.rglob("*") if p.is_file() and p.name.endswith((".json", ".json.gz"))
                  and "rocprof" not in p.name)


# The pure run (`make test-pure`) meets the same corpus through the same code above the
# table: what it must show is that a pure parse's index is stored and reopened right, not
# every trace's bytes once more (`make test`'s corpus sweep holds each native output to the
# pure one byte for byte). A third of the traces, spread over the sorted list, keeps each
# kind (Kineto, Fuchsia, plain and gzip JSON, the biggest) at a third of the time.
PURE_EVERY = 3


def corpus_for_this_run(paths: list[Path]) -> list[Path]:
    """`paths`, or every `PURE_EVERY`-th of them when the native code is switched off."""
    if os.environ.get("TB_REDUCE_NATIVE") == "0":
        return paths[::PURE_EVERY]
    return paths


def copied_gz_trace(tmp_path: Path) -> Path:
    """The corpus's largest real PyTorch trace as gzip (its events are read back by
    inflating), copied to `tmp_path/logs/run/` (the caller checks the corpus is there)."""
    src = max((p for p in chrome_traces() if p.name.endswith(".pt.trace.json.gz")), key=lambda p: p.stat().st_size)
    dst = tmp_path / "logs" / "run" / src.name
    dst.parent.mkdir(parents=True)
    shutil.copyfile(src, dst)
    return dst


def copied_xplane(tmp_path: Path) -> Path:
    """The demo's real JAX profile (an XSpace), copied to `tmp_path/logs/run/plugins/profile/...`
    so a test can change its version or cut it."""
    src = next((ROOT / "demo_logdir" / "jax_mlp").rglob("*.xplane.pb"))
    dst = tmp_path / "logs" / "run" / "plugins" / "profile" / "2026_12_05" / src.name
    dst.parent.mkdir(parents=True)
    shutil.copyfile(src, dst)
    return dst


def reduced(index, level, window=(None, None)) -> bytes:
    out = io.BytesIO()
    reduce_index(index, out, level, window[0], window[1], gzip=False, with_input_index=True)
    return out.getvalue()


def reductions(index, windows: list) -> list[bytes]:
    """Each (level, t0, t1) of `windows` reduced from `index`, uncompressed, in order."""
    out = []
    for level, t0, t1 in windows:
        buf = io.BytesIO()
        reduce_index(index, buf, level, t0, t1, gzip=False)
        out.append(buf.getvalue())
    return out


def identity(path: Path) -> FileIdentity:
    return FileIdentity.from_stat(os.stat(path))


def stored_folder(store: IndexStore, path: Path) -> Path:
    return Path(store.directory) / index_digest(str(path), identity(path))


def _resum(manifest: dict, folder: Path, name: str) -> None:
    data = (folder / name).read_bytes()
    manifest["files"][name] = [len(data), store_module.isal_zlib.crc32(data)]
