"""tb-reduce: serve profiler traces that are too big to open, reduced, in TensorBoard."""

from setuptools import find_packages, setup

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
    python_requires=">=3.9",
    install_requires=[
        "numpy>=1.24",
        "msgspec>=0.18",
        "orjson>=3.8",
        "isal>=1.6",
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
                 "playwright>=1.40", "torch==2.13.0", "tensorboard-plugin-profile==2.24.2"],
    },
    entry_points={
        "console_scripts": ["tb-reduce=tb_reduce_plugin.cli:main"],
        "tensorboard_plugins": ["tb_reduce = tb_reduce_plugin.plugin:TraceReduceLoader"],
    },
    classifiers=["Programming Language :: Python :: 3", "License :: OSI Approved :: Apache Software License"],
)
