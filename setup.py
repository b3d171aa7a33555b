"""tb-reduce: serve profiler traces that are too big to open, reduced, in TensorBoard."""

import os

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    """Build the native scanner when a C compiler is there; without one, install anyway:
    every native path has a pure-Python twin with the same results (tb_reduce_plugin.native)."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # no compiler, no headers
            print(f"tb-reduce: the native scanner was not built ({exc}); the pure-Python paths will be used")

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:
            print(f"tb-reduce: {ext.name} was not built ({exc}); the pure-Python paths will be used")


# TB_REDUCE_SANITIZE=1 builds with AddressSanitizer and UBSan (`make asan`).
_SANITIZE = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-O1", "-g"]
_sanitize = os.environ.get("TB_REDUCE_SANITIZE") == "1"
SCAN = Extension(
    "tb_reduce_plugin._scan",
    sources=["tb_reduce_plugin/_scan.c"],
    # -O3: the scan ~5 % faster than at -O2 (bench_scan.py). -ffp-contract=off: no fused multiply-add, so
    # busy_parts computes what its numpy twin does, to the bit (nor does -O3 reassociate a sum).
    extra_compile_args=["-O3", "-Wall", "-Wextra", "-Wno-missing-field-initializers", "-ffp-contract=off",
                        *(_SANITIZE if _sanitize else [])],
    extra_link_args=_SANITIZE[:1] if _sanitize else [],
)
# Mapped index files that shrink under their reader read as zeros instead of SIGBUS (tb_reduce_plugin.mapped).
GUARD = Extension("tb_reduce_plugin._guard", sources=["tb_reduce_plugin/_guard.c"],
                  extra_compile_args=["-O2", "-Wall", "-Wextra", "-Wno-missing-field-initializers"])

setup(
    name="tb-reduce-plugin",
    version="0.1.0",
    description="Reduce profiler traces (Chrome JSON, PyTorch, JAX/XProf) that are too big to open",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    packages=[*find_packages(include=["tb_reduce_plugin", "tb_reduce_plugin.*"]), "tb_reduce_plugin.frontend"],
    # The dashboard lives in frontend/ (plain ES modules) and ships inside the package.
    package_dir={"tb_reduce_plugin.frontend": "frontend"},
    package_data={"tb_reduce_plugin.frontend": ["*.js", "*.html", "*.css", "*/*.js", "*/*.css"]},
    ext_modules=[SCAN, GUARD],
    cmdclass={"build_ext": OptionalBuildExt},
    python_requires=">=3.9",
    install_requires=[
        "numpy>=1.24",
        "msgspec>=0.18",
        "orjson>=3.8",
        "isal>=1.6",
        "zstandard>=0.22",  # the text kept of a gzip trace (`formats.kept_codec`): smaller and faster than deflate
        "protobuf>=4.25",  # upb, the C parser; our own XSpace schema needs no protoc
        "tensorboard>=2.21",
        "google-crc32c>=1.5",  # the event-file reader checks every record's CRC32C in C
        "werkzeug>=2.0",
        "google-re2>=1.1",  # search patterns in linear time: no regex can hang the server
    ],
    extras_require={
        # jax records the real >1 M-event profile the XSpace tests compare against.
        # playwright drives the Debian chromium (.ci/run installs it) for the dashboard tests.
        # torch drives the live sidecar's tests on a real training loop; 2.13.0 is the CPU build these
        # machines hold on disk (an unpinned torch would pull a CUDA build of several GB).
        # tensorboard-plugin-profile (XProf) 2.24.2: the Profile tab tb-reduce answers, pinned to the
        # version whose requests and JSON the tests check (a test extra: never a runtime dependency).
        "test": ["pytest>=7.4", "pytest-xdist>=3.3", "hypothesis>=6.80", "ruff>=0.4", "jax>=0.4.30",
                 "playwright>=1.40", "torch==2.13.0", "tensorboard-plugin-profile==2.24.2",
                 "distributed>=2024.8", "moto[server]>=5.2.5", "s3fs>=2026.9.0", "pyarrow>=15", "duckdb>=1.0"],
        # `tb-reduce export`: the event model as Apache Parquet.
        "parquet": ["pyarrow>=15"],
        # --tb_reduce_workers=tcp://scheduler:8786: merged multi-host views on an existing Dask cluster.
        "dask": ["distributed>=2024.8"],
        # Logdirs on object stores (`--logdir s3://bucket/prefix`, `gs://…`), read through fsspec.
        "s3": ["fsspec>=2026.9.0", "s3fs>=2026.9.0"],
        "gcs": ["fsspec>=2026.9.0", "gcsfs>=2026.10.1"],
    },
    entry_points={
        "console_scripts": ["tb-reduce=tb_reduce_plugin.cli:main"],
        "tensorboard_plugins": ["tb_reduce = tb_reduce_plugin.serve.plugin:TraceReduceLoader"],
    },
    # The license as an SPDX expression (PEP 639), not a classifier: setuptools >= 77 (pyproject.toml's
    # build-system) deprecates license classifiers with a warning on every build.
    license="Apache-2.0",
    classifiers=["Programming Language :: Python :: 3"],
)
