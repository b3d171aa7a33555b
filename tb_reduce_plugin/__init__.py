"""tb-reduce: open profiler traces that are too big to open.

Formats in (`chrome_json`, later `xspace`) → one columnar event model (`model`) →
reduction (`plan`) → writer (`writer`) → surfaces (`cli`, the TensorBoard plugin).
"""

__version__ = "0.1.0"
FORMAT_VERSION = 1
# What a reduction writes within that format: bumped when the bytes of a reduced trace
# change (2: summaries' args.busy), so the reductions cached on disk are made again.
OUTPUT_REVISION = 2
