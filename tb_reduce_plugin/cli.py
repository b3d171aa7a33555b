"""The `tb-reduce` command line.

`tb-reduce reduce IN -o OUT` writes a reduced trace, shows progress on a terminal,
prints one summary line, and on bad input exits 2 with one line on stderr — never a
traceback, since the users are often running it on a cluster log they cannot fix.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Optional, Sequence

from .errors import TraceError
from .pipeline import parse_level, reduce_file

EXIT_BAD_INPUT = 2


def _human(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n} B"  # pragma: no cover


class _Bar:
    """A minimal progress bar on stderr, drawn only when stderr is a terminal."""

    def __init__(self, label: str) -> None:
        self.enabled = sys.stderr.isatty()
        self.label = label
        self._last = 0.0

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if not self.enabled or (now - self._last < 0.1 and done < total):
            return
        self._last = now
        frac = min(1.0, done / total) if total else 1.0
        width = 30
        fill = int(frac * width)
        sys.stderr.write(f"\r{self.label} [{'#' * fill}{'.' * (width - fill)}] {frac * 100:5.1f}%")
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write("\r" + " " * (len(self.label) + 42) + "\r")
            sys.stderr.flush()


def _cmd_reduce(args: argparse.Namespace) -> int:
    if (args.start_us is None) != (args.end_us is None):
        raise TraceError("give both --start-us and --end-us, or neither")
    level = parse_level(args.level)
    bar = _Bar(os.path.basename(args.input)[:40])
    try:
        stats = reduce_file(args.input, args.output, level, args.start_us, args.end_us,
                            max_inflated_bytes=int(args.max_inflated_mb * 1024 * 1024), progress=bar)
    finally:
        bar.close()
    i, o = stats["input"], stats["output"]
    ev_pct = 100.0 * o["events"] / max(i["events"], 1)
    by_pct = 100.0 * o["json_bytes"] / max(i["json_bytes"], 1)
    auto = " (auto)" if "auto" in stats else ""
    print(
        f"{os.path.basename(args.input)}: level {stats['level']}{auto}: "
        f"{i['events']:,} → {o['events']:,} events ({ev_pct:.1f}%), "
        f"{_human(i['json_bytes'])} → {_human(o['json_bytes'])} JSON ({by_pct:.1f}%), "
        f"{_human(o['file_bytes'])} written to {args.output} in {stats['timings_s']['total']:.2f} s"
        + (" [input truncated: read up to its last complete event]" if i.get("truncated") else "")
    )
    if args.stats_json:
        with open(args.stats_json, "w") as f:
            json.dump(stats, f, indent=2)
            f.write("\n")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tb-reduce", description="Reduce profiler traces that are too big to open.")
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("reduce", help="write a reduced trace", description="Write a reduced Chrome trace (.json.gz or .json).")
    r.add_argument("input", help="a Chrome trace JSON file (plain or gzip)")
    r.add_argument("-o", "--output", required=True, help="output path; gzip when it ends in .gz")
    r.add_argument("--level", default="2", help="0 (lossless) to 4 (coarsest), or auto (default 2)")
    r.add_argument("--start-us", type=float, default=None, help="window start, µs (trace clock)")
    r.add_argument("--end-us", type=float, default=None, help="window end, µs (trace clock)")
    r.add_argument("--stats-json", default=None, help="also write the statistics as JSON here")
    r.add_argument("--max-inflated-mb", type=float, default=64 * 1024, help="refuse inputs that inflate past this (MB)")
    r.set_defaults(func=_cmd_reduce)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except TraceError as exc:
        print(f"tb-reduce: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except MemoryError:
        print("tb-reduce: error: out of memory; try a smaller window", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("tb-reduce: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # a bug of ours: still one line, never a traceback
        print(f"tb-reduce: internal error ({type(exc).__name__}: {exc}); please report it", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
