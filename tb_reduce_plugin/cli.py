"""The `tb-reduce` command line.

`tb-reduce reduce IN -o OUT` writes a reduced trace, shows progress on a terminal,
prints one summary line; `tb-reduce waveforms TRACE` prints its per-step series;
`tb-reduce scalars PATH` the scalars of TensorBoard event files, past damaged records.
On bad input each exits 2 with one line on stderr — never a
traceback, since the users are often running it on a cluster log they cannot fix.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import re
import sys
import time
from typing import Any, Callable, NoReturn, Optional, Sequence

from .budget import machine_memory_bytes
from .errors import TraceError, display_name
from .reduce.pipeline import check_window, parse_level, reduce_file, waveforms_file
from .reduce.writer import atomic_output

EXIT_BAD_INPUT = 2


def _human(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n} B"  # pragma: no cover


class _Bar:
    """A progress line on stderr, drawn only when stderr is a terminal: the stage (`reduce`
    reads the file twice: to index it, then to write the kept events), a bar, and how much
    of the file that stage has read, at what rate."""

    def __init__(self, label: str, stages: Sequence[str] = ("reading", "writing")) -> None:
        self.enabled = sys.stderr.isatty()
        self.label = label
        self.stages = tuple(stages)
        self._last = 0.0
        self._began = time.monotonic()
        self._width = 0

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if not self.enabled or (now - self._last < 0.1 and done < total):
            return
        self._last = now
        line = bar_line(self.label, self.stages, done, total, now - self._began)
        self._width = max(self._width, len(line))
        sys.stderr.write("\r" + line.ljust(self._width))
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write("\r" + " " * self._width + "\r")
            sys.stderr.flush()


def bar_line(label: str, stages: Sequence[str], done: int, total: int, seconds: float) -> str:
    """`label stage [####......] 42.0% 41 MB of 98 MB, 35 MB/s`: `total` spans the stages in
    equal parts (each a pass over the file); the bytes and the rate are the current stage's."""
    frac = min(1.0, done / total) if total else 1.0
    k = min(len(stages) - 1, int(frac * len(stages))) if stages else 0
    part = total / max(len(stages), 1)
    here = max(0.0, done - k * part)
    width = 30
    fill = int(frac * width)
    rate = done / seconds if seconds > 0 else 0.0
    stage = f" {stages[k]}" if stages else ""
    return (f"{label}{stage} [{'#' * fill}{'.' * (width - fill)}] {frac * 100:5.1f}% "
            f"{_human(here)} of {_human(part)}, {_human(rate)}/s")


def _finite(value: Any) -> Any:
    """`value` with every non-finite float made None, so the stats are strict JSON.

    Python's `json` writes `Infinity`/`NaN`, which no other JSON reader accepts; a
    hostile trace can still make one (events at -1e308 and 1e308 give an infinite
    default window, hence `bucket_us`), and a null says "no such number" honestly.
    """
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def default_memory_mb() -> float:
    """Three quarters of this machine's (or container's) memory: the rest stays for the
    system and whatever else runs, and a trace that needs more fails with a message
    instead of taking the machine down."""
    total = machine_memory_bytes()
    return max(256.0, 0.75 * total / (1024 * 1024)) if total else 8192.0


def _window_args(args: argparse.Namespace) -> bool:
    """`--start/--end` (from the trace start) or `--start-us/--end-us` (trace clock), both of
    a pair or neither, put into `args.start_us`/`args.end_us`; whether they are from the start."""
    relative = args.start is not None or args.end is not None
    if relative and (args.start_us is not None or args.end_us is not None):
        raise TraceError("give --start/--end (from the trace start) or --start-us/--end-us (trace clock), not both")
    if relative:
        if (args.start is None) != (args.end is None):
            raise TraceError("give both --start and --end, or neither")
        args.start_us, args.end_us = args.start, args.end
    elif (args.start_us is None) != (args.end_us is None):
        raise TraceError("give both --start-us and --end-us, or neither")
    return relative


def _add_window(p: argparse.ArgumentParser) -> None:
    p.add_argument("--start", type=_from_start, default=None, metavar="TIME",
                   help="window start from the trace start, as the dashboard shows it: 42s, 42000ms or 42000000us")
    p.add_argument("--end", type=_from_start, default=None, metavar="TIME", help="window end from the trace start")
    p.add_argument("--start-us", type=float, default=None, help="window start, µs in the trace's own clock")
    p.add_argument("--end-us", type=float, default=None, help="window end, µs in the trace's own clock")


def _cmd_reduce(args: argparse.Namespace) -> int:
    relative = _window_args(args)
    level = parse_level(args.level)
    check_window(args.start_us, args.end_us)
    # Opened first: a stats path that cannot be written, or that is the input or
    # the output, is refused before minutes of reduction, not after.
    stats_out = None
    if args.stats_json:
        stats_out = atomic_output(args.stats_json, {"the input trace": args.input, "the output": args.output})
    bar = _Bar(os.path.basename(args.input)[:40])
    stats_written = False
    indexer = _indexer(args)
    try:
        try:
            stats = reduce_file(args.input, args.output, level, args.start_us, args.end_us,
                                max_inflated_bytes=int(args.max_inflated_mb * 1024 * 1024), progress=bar,
                                max_memory_bytes=int(args.max_memory_mb * 1024 * 1024), from_start=relative,
                                indexer=indexer)
        finally:
            bar.close()
        _keep_prepared(indexer)
        if stats_out is not None:
            f, finish = stats_out
            text = json.dumps(_finite(stats), indent=2, allow_nan=False) + "\n"
            try:
                f.write(text.encode())
            except OSError as exc:  # the temp file has no name the user knows: name theirs
                raise OSError(exc.errno, exc.strerror or str(exc), args.stats_json) from None
            stats_written = True
            finish(True)
    finally:
        if stats_out is not None and not stats_written:
            stats_out[1](False)
    window = stats.get("window")
    if window is not None and window["events"] == 0:
        a, b = window["from_start_us"]
        first, last = window["trace_us"]
        print(f"tb-reduce: warning: the window {_span(a)}–{_span(b)} from the trace start holds no event "
              f"(the trace spans 0 s–{_span(last - first)}; trace clock {first:.3f}–{last:.3f} µs)",
              file=sys.stderr)
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
        + (" [index reopened from --cache-dir]" if stats.get("index") == "stored" else "")
    )
    return 0


def _span(us: float) -> str:
    """A time from the trace start, as the dashboard writes it (s, ms or µs)."""
    if abs(us) >= 1e6:
        return f"{us / 1e6:.6g} s"
    if abs(us) >= 1e3:
        return f"{us / 1e3:.6g} ms"
    return f"{us:.6g} µs"


# A time from the trace start: a number and its unit (`42s`, `42000ms`, `42000000us`, `42000000µs`).
_TIME_FROM_START = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[-+]?[0-9]+)?)\s*(s|ms|us|µs)\s*$", re.I)
_UNIT_US = {"s": 1e6, "ms": 1e3, "us": 1.0, "µs": 1.0}


def _from_start(text: str) -> float:
    """`--start`/`--end`: a time from the trace start, in µs; the unit is required (a bare
    number could be any of them)."""
    m = _TIME_FROM_START.match(text)
    if m is None:
        raise argparse.ArgumentTypeError(f"not a time from the trace start: {text!r} (e.g. 42s, 42000ms, 42000000us)")
    value = float(m.group(1)) * _UNIT_US[m.group(2).lower()]
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite time, not {text!r}")
    return value


def _cmd_waveforms(args: argparse.Namespace) -> int:
    indexer = _indexer(args)
    series = waveforms_file(args.input, max_inflated_bytes=int(args.max_inflated_mb * 1024 * 1024),
                            max_memory_bytes=int(args.max_memory_mb * 1024 * 1024), indexer=indexer)
    _keep_prepared(indexer)
    if args.format == "json":
        sys.stdout.write(json.dumps(_finite(series.to_json()), allow_nan=False) + "\n")
    else:
        header, rows = series.rows()
        out = csv.writer(sys.stdout, lineterminator="\n")
        out.writerow(header)
        out.writerows(rows)
    if series.reason:
        print(f"tb-reduce: {display_name(os.path.basename(args.input))}: {series.reason}", file=sys.stderr)
    return 0


EXIT_REGRESSION = 1


def _cmd_diff(args: argparse.Namespace) -> int:
    from .compare.files import diff_files
    from .compare.gate import parse_condition
    from .compare.report import CSV_HEADER, csv_rows, table_text

    conditions = [parse_condition(spec) for spec in args.fail_if or ()]
    (base, base_version), (candidate, candidate_version) = _one_trace(args.base), _one_trace(args.candidate)
    indexer = _indexer(args)
    doc, verdicts = diff_files(base, candidate, args.steps, conditions, base_steps=args.base_steps,
                               expect=(base_version, candidate_version),
                               max_inflated_bytes=int(args.max_inflated_mb * 1024 * 1024),
                               max_memory_bytes=int(args.max_memory_mb * 1024 * 1024), indexer=indexer)
    _keep_prepared(indexer)
    try:
        if args.format == "json":
            doc["gate"] = [v.to_json() for v in verdicts]
            sys.stdout.write(json.dumps(_finite(doc), allow_nan=False) + "\n")
        elif args.format == "csv":
            out = csv.writer(sys.stdout, lineterminator="\n")
            out.writerow(CSV_HEADER)
            out.writerows(_finite(csv_rows(doc)))
        else:
            sys.stdout.write(table_text(doc, args.limit))
        sys.stdout.flush()
    except BrokenPipeError:  # `| head`: the reader has what it wanted; the gate's answer still stands
        _stdout_gone()
    for v in verdicts:
        print(f"tb-reduce: {v.line}", file=sys.stderr)
    failed = sum(v.failed for v in verdicts)
    if failed:
        print(f"tb-reduce: {failed} of {len(verdicts)} conditions failed", file=sys.stderr)
        return EXIT_REGRESSION
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    from .export.files import export_file

    relative = _window_args(args)
    indexer = _indexer(args)
    limits = dict(max_inflated_bytes=int(args.max_inflated_mb * 1024 * 1024),
                  max_memory_bytes=int(args.max_memory_mb * 1024 * 1024), indexer=indexer)
    jobs = (_export_jobs(args.input, args.output) if os.path.isdir(args.input)
            else [(args.input, args.output, None, None)])
    for src, out, host, version in jobs:
        got = export_file(src, out, args.start_us, args.end_us, from_start=relative, host=host, expect=version,
                          **limits)
        _keep_prepared(indexer)
        print(f"{display_name(os.path.basename(src))}: {got['rows']:,} rows of {got['events']:,} events, "
              f"{_human(got['bytes'])} of Parquet written to {display_name(out)}")
    return 0


def _export_jobs(folder: str, out_dir: str) -> list[tuple[str, str, Optional[str], Any]]:
    """A run's folder exported: each host's trace to OUT/HOST.parquet (OUT/RUN/HOST.parquet
    where the folder holds several runs), with a `host` column; JAX's JSON export of an
    XSpace beside it is left out (the XSpace holds every event, the export at most JAX's cap)."""
    from .serve.discovery import Catalog

    files = [f for f in Catalog(folder, max_age_s=0).files().values() if not f.export_of]
    if not files:
        raise TraceError(f"{display_name(folder)}: no trace in this folder (nor in its runs' profile folders)")
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise TraceError(f"{display_name(out_dir)}: a folder's traces are exported into a folder; this is a file")
    runs = {f.run for f in files}
    jobs = []
    for f in sorted(files, key=lambda f: (f.run, f.host)):
        where = out_dir if len(runs) == 1 else os.path.join(out_dir, f.run.replace("/", "__") or "_")
        os.makedirs(where, exist_ok=True)
        jobs.append((f.path, os.path.join(where, f"{f.host}.parquet"), f.host, f.identity()))
    return jobs


def _one_trace(path: str) -> tuple[str, Any]:
    """A trace file as given, or the one trace of a run's folder (`diff runs/main runs/pr`)
    with the version the listing saw (read only if it is still that file)."""
    if not os.path.isdir(path):
        return path, None
    from .serve.discovery import Catalog

    files = sorted((f for f in Catalog(path, max_age_s=0).files().values() if not f.export_of), key=lambda f: f.path)
    if len(files) != 1:
        hosts = ", ".join(display_name(f.host) for f in files[:5]) + (", …" if len(files) > 5 else "")
        raise TraceError(f"{display_name(path)}: " + (f"{len(files)} traces in this folder ({hosts}); give one file"
                                                      if files else "no trace in this folder"))
    return files[0].path, files[0].identity()


def _stdout_gone() -> None:
    """Standard output closed by its reader: what is still written to it goes nowhere
    (else Python reports the broken pipe again as it exits)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def _step_range(text: str) -> Any:
    from .compare.steps import parse_step_range

    try:
        return parse_step_range(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _condition(text: str) -> str:
    """`--fail-if`: checked when parsed (a bad spec is argparse's one line, exit 2)."""
    from .compare.gate import parse_condition

    try:
        parse_condition(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _json_number(x: float) -> Any:
    """A float for strict JSON: non-finite ones as the strings JavaScript's `Number()` reads."""
    if math.isfinite(x):
        return x
    return "NaN" if x != x else ("Infinity" if x > 0 else "-Infinity")


def _cmd_scalars(args: argparse.Namespace) -> int:
    from .waveforms.scalars import RunScalars
    from .waveforms.smoothing import smooth

    run = RunScalars(args.path)
    files = run.event_files()
    if not files:
        raise TraceError(f"{run.name}: no event files (names with 'tfevents') in this folder")
    run.poll()
    if run.records == 0:
        skipped = sum(g.skipped for g in run.gaps)
        what = "not an event file" if len(files) == 1 else "no event file in it holds a valid record"
        if skipped:
            raise TraceError(f"{run.name}: {what} (no valid record; {skipped} bytes skipped)")
        if run.pending_bytes:
            raise TraceError(f"{run.name}: no complete record yet ({run.pending_bytes} bytes of one being written)")
        raise TraceError(f"{run.name}: no records (empty)")
    tags = run.tags()
    if args.tag is not None:
        if args.tag not in tags:
            known = ", ".join(display_name(t) for t in tags) or "none"
            raise TraceError(f"{run.name}: no scalar tag {display_name(args.tag)!r}; its scalar tags: {known}")
        tags = [args.tag]
    for gap in run.gaps:
        print(str(gap), file=sys.stderr)
    for reader in run.readers:
        if reader.pending_bytes:
            print(f"{reader.name}: {reader.pending_bytes} bytes after the last complete record "
                  "(a record being written)", file=sys.stderr)
    columns = ["step", "wall_time", "value"] + (["smoothed"] if args.smoothing is not None else [])
    if args.format == "json":
        doc: dict = {"path": run.name, "columns": columns, "smoothing": args.smoothing, "tags": {}}
        for tag in tags:
            steps, walls, values = run.series(tag)
            cols = [steps.tolist(), [_json_number(x) for x in walls.tolist()], [_json_number(x) for x in values.tolist()]]
            if args.smoothing is not None:
                cols.append([_json_number(x) for x in smooth(values, args.smoothing).tolist()])
            doc["tags"][tag] = {"points": [list(p) for p in zip(*cols)]}
        doc["gaps"] = [{"file": g.file, "offset": g.offset, "skipped": g.skipped, "reason": g.reason} for g in run.gaps]
        doc["pending_bytes"] = run.pending_bytes
        sys.stdout.write(json.dumps(doc, allow_nan=False) + "\n")
        return 0
    out = csv.writer(sys.stdout, lineterminator="\n")
    out.writerow(["tag", *columns])
    for tag in tags:
        steps, walls, values = run.series(tag)
        cols = [steps.tolist(), map(repr, walls.tolist()), map(repr, values.tolist())]  # repr: nan, inf, -inf
        if args.smoothing is not None:
            cols.append(map(repr, smooth(values, args.smoothing).tolist()))
        out.writerows((tag, *p) for p in zip(*cols))
    return 0


def _cmd_live(args: argparse.Namespace) -> int:
    import logging
    import signal

    from .live.sidecar import LiveConfig, Sidecar

    if not args.watch:
        writer = {"jax": "tb_reduce_plugin.live.capture.jax_windows(FOLDER)",
                  "torch": "tb_reduce_plugin.live.capture.torch_schedule(FOLDER)"}.get(args.source, "the profiler")
        raise TraceError(f"--source {args.source} needs --watch FOLDER (where {writer} writes its windows)")
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    if args.nice:  # below the training's priority, if asked (bench/bench_live_blocks.py: at 0 it costs least)
        try:
            os.nice(args.nice)
        except OSError as exc:
            print(f"tb-reduce live: could not lower the priority by {args.nice}: {exc.strerror or exc}",
                  file=sys.stderr)
    sidecar = Sidecar(LiveConfig(logdir=args.logdir, watch=args.watch, every_s=args.every, level=args.level,
                                 keep=args.keep, ring_mb=args.ring_mb, triggers=args.trigger or None,
                                 baseline=args.baseline,
                                 before_s=args.before, after_s=args.after, max_per_hour=args.max_per_hour,
                                 cooldown_s=args.cooldown, max_memory_mb=args.max_memory_mb,
                                 keep_anomalies=args.keep_anomalies, move_raw=args.source in ("torch", "jax")))
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    print(f"tb-reduce live: watching {args.watch} into {os.path.join(args.logdir, 'live')} "
          f"(triggers: {', '.join(t.spec for t in sidecar.triggers)}); Ctrl+C to stop", file=sys.stderr)
    try:
        sidecar.run(stop=lambda: bool(stopping))
    except KeyboardInterrupt:
        pass
    print(f"tb-reduce live: {sidecar.windows} window(s), {len(sidecar.anomalies)} anomaly run(s)", file=sys.stderr)
    return 0


def _niceness(text: str) -> int:
    """A niceness increment, 0-19 (as `nice -n`; raising the priority would need privileges)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if not 0 <= n <= 19:
        raise argparse.ArgumentTypeError(f"must be 0 to 19, not {text!r}")
    return n


def _seconds(text: str) -> float:
    """A duration: `10s`, `500ms`, `2` (seconds), above 0."""
    t = text.strip().lower()
    scale = 1.0
    for suffix, factor in (("ms", 1e-3), ("s", 1.0), ("m", 60.0)):
        if t.endswith(suffix):
            t, scale = t[: -len(suffix)], factor
            break
    try:
        value = float(t) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 10s, 500ms)") from None
    if not 0 < value <= 86400:
        raise argparse.ArgumentTypeError(f"must be above 0 and at most a day, not {text!r}")
    return value


class _Parser(argparse.ArgumentParser):
    """argparse, but a wrong argument is one line on stderr and exit 2.

    argparse prints the whole usage block first; the contract (SPEC §6) is one
    line, the same shape as every other refusal. `--help` is unchanged.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # argparse (before 3.14) takes `--start-us -1e3` for an option named -1e3
        # and says "expected one argument": accept any negative number as a value
        # (-inf and -nan too, so that they get the message saying why they are refused).
        self._negative_number_matcher = re.compile(r"^-((\d+\.?\d*|\.\d+)(e[-+]?\d+)?|inf|infinity|nan)$", re.I)

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_BAD_INPUT, f"tb-reduce: error: {' '.join(message.split())} (see {self.prog} --help)\n")


def _argument(convert: Callable[[str], Any], kind: str, ok: Callable[[Any], bool], need: str) -> Callable[[str], Any]:
    """An argparse type: the text converted (else "not a KIND"), then checked (else "must be NEED")."""
    def parse(text: str) -> Any:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a {kind}: {text!r}") from None
        if not ok(value):  # also false for nan
            raise argparse.ArgumentTypeError(f"must be {need}, not {text!r}")
        return value

    return parse


# A size limit in MB: finite and above 0 (nan would disable every comparison, inf and
# huge values overflow the byte count).
_megabytes = _argument(float, "number", lambda v: 0 < v <= 1e300, "a number of MB above 0 and at most 1e300")
_weight = _argument(float, "number", lambda v: 0 <= v <= 1, "a number from 0 to 1")  # smoothing: 0 (none) to 1
_positive = _argument(int, "whole number", lambda v: v >= 1, "at least 1")
# The raw ring: at least two disk blocks (a window and its record each take one at least: the
# ring counts blocks), so 0.01 MB; below that no window fits, and 1e-9 MB is a cap of 0 bytes.
RING_MIN_MB = 0.01
_ring_megabytes = _argument(float, "number", lambda v: RING_MIN_MB <= v <= 1e300,
                            f"a number of MB from {RING_MIN_MB:g} to 1e300")


def _trigger_spec(text: str) -> str:
    """`--trigger`: checked as the sidecar will parse it (`live.triggers.parse_trigger`), so a
    bad spec is argparse's one line; the spec itself is passed on."""
    from .live.triggers import TriggerError, parse_trigger

    try:
        parse_trigger(text)
    except TriggerError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _file_name(text: str) -> str:
    """A path to write: not empty (an empty name would fail only at the final rename)."""
    if not text:
        raise argparse.ArgumentTypeError("must not be empty")
    return text


def _add_limits(p: argparse.ArgumentParser) -> None:
    """The limits every command that reads a trace takes, and where its index may be kept."""
    p.add_argument("--max-inflated-mb", type=_megabytes, default=64 * 1024, help="refuse inputs that inflate past this (MB)")
    _add_max_memory(p)
    p.add_argument("--cache-dir", type=_file_name, default=None, metavar="DIR",
                   help="keep the trace's parsed index in DIR/index (per file version; at most a quarter of the "
                        "disk's free space, least recently used out), so the next run on the same file reopens it "
                        "instead of parsing it again; the plugin's --tb_reduce_cache_dir is such a DIR")


def _indexer(args: argparse.Namespace) -> Optional[Callable[..., Any]]:
    """`index.store.indexed` over `--cache-dir`'s store; without one (or where it cannot be
    used), a parse that writes a big trace's columns to a temporary folder."""
    from .index.store import IndexStore, StoreIndexer, default_index_bytes, parse_spilling_to_temp

    if not args.cache_dir:
        return parse_spilling_to_temp

    folder = os.path.join(args.cache_dir, "index")
    store = IndexStore(folder, default_index_bytes(folder))
    return StoreIndexer(store) if store.usable else parse_spilling_to_temp


def _keep_prepared(indexer: Callable[..., Any]) -> None:
    """What the run prepared on a `--cache-dir` index, kept beside it for the next run."""
    keep = getattr(indexer, "keep_prepared", None)
    if keep is not None:
        keep()


def _add_max_memory(p: argparse.ArgumentParser,
                    what: str = "stop with an error rather than use more memory than this") -> None:
    """`--max-memory-mb`, one parser and default for every command that takes it (`reduce`,
    `waveforms`, `live`); `what` says what the command does at the limit."""
    p.add_argument("--max-memory-mb", type=_megabytes, default=default_memory_mb(),
                   help=f"{what} (MB; default: 3/4 of this machine's memory, here {default_memory_mb():,.0f})")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="tb-reduce", description="Reduce profiler traces that are too big to open.")
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("reduce", help="write a reduced trace",
                       description="Write a reduced Chrome trace (.json.gz or .json) of any trace tb-reduce reads: "
                                   "Chrome trace JSON, PyTorch, JAX/TensorFlow or XSpace.")
    r.add_argument("input", help="a trace: Chrome trace JSON (plain or gzip), a PyTorch trace (*.pt.trace.json[.gz]), "
                                 "a JAX/TensorFlow trace (*.trace.json.gz), or an XProf/JAX XSpace (*.xplane.pb)")
    r.add_argument("-o", "--output", required=True, type=_file_name, help="output path; gzip when it ends in .gz")
    r.add_argument("--level", default="2", help="0 (lossless) to 4 (coarsest), or auto (default 2)")
    _add_window(r)
    r.add_argument("--stats-json", default=None, type=_file_name, help="also write the statistics as JSON here")
    _add_limits(r)
    r.set_defaults(func=_cmd_reduce)
    w = sub.add_parser(
        "waveforms", help="per-step series of a trace (step time, busy time per category)",
        description="One row per step (from ProfilerStep#N, step_num or XProf Steps markers): step, start_us, "
                    "step_time_ms and <category>_ms busy time, with unaccounted_ms the step time no op on the "
                    "step's thread accounts for, and memory_peak_mb_<device> where a PyTorch trace records memory "
                    "(profile_memory=True) (docs/SEMANTICS.md, Waveforms). JSON: "
                    '{"steps": [{"step", "start_us", "end_us", "step_time_ms", "busy_ms": {category: ms}, '
                    '"memory_mb": {series: MB}}], '
                    '"series": [names], "marker", "reason", "slowest": [indices of the steps that stand out, '
                    'maybe none], "unaccounted_stands_out": [indices]}. A trace without step markers '
                    "gives no rows and says why on stderr.")
    w.add_argument("input", help="a trace: Chrome JSON (plain or gzip), PyTorch or JAX trace, or XSpace .xplane.pb")
    w.add_argument("--format", choices=("csv", "json"), default="csv", help="output format on stdout (default csv)")
    _add_limits(w)
    w.set_defaults(func=_cmd_waveforms)
    s = sub.add_parser(
        "scalars", help="the scalar series of TensorBoard event files",
        description="Rows tag, step, wall_time, value (+ smoothed with --smoothing: TensorBoard's debiased "
                    "exponential smoothing, per tag, in record order) of an event file or of a run folder's "
                    "*tfevents* files (name order; not subfolders). Points stay in record order: a repeated or "
                    "decreasing step is kept where it was written. CSV writes nan, inf, -inf. JSON: "
                    '{"path", "columns": ["step", "wall_time", "value"(, "smoothed")], "smoothing": W or null, '
                    '"tags": {TAG: {"points": [[step, wall_time, value(, smoothed)], ...]}}, '
                    '"gaps": [{"file", "offset", "skipped", "reason"}], "pending_bytes": N}, non-finite numbers '
                    'as the strings "NaN", "Infinity", "-Infinity". Damaged records are skipped, the reading '
                    "carries on at the next valid one, and each skipped region is one line on stderr "
                    "(FILE: skipped N bytes at offset O (REASON)). Exit 2 when no record could be read.")
    s.add_argument("path", help="an event file, or a run folder holding *tfevents* files")
    s.add_argument("--tag", default=None, help="only this tag")
    s.add_argument("--smoothing", type=_weight, default=None, metavar="W",
                   help="add a smoothed column, weight W from 0 to 1 (TensorBoard's default is 0.6)")
    s.add_argument("--format", choices=("csv", "json"), default="csv", help="output format on stdout (default csv)")
    s.set_defaults(func=_cmd_scalars)
    x = sub.add_parser(
        "export", help="write the event model as Apache Parquet (for DuckDB, pandas, polars)",
        description="One row per event (metadata aside, a B/E pair as its B with the pair's dur), in file order: "
                    "event, name, cat, ph, ts, dur (µs), pid, tid (as text), process, thread, depth and self_us "
                    "(slices), step (the step it starts in), written in row groups as they are made. Needs pyarrow "
                    "(pip install 'tb-reduce-plugin[parquet]').")
    x.add_argument("input", help="a trace (Chrome JSON, plain or gzip, PyTorch or JAX trace, XSpace .xplane.pb), or a "
                                 "run's folder: each host's trace then goes to OUTPUT/HOST.parquet, with a host column")
    x.add_argument("-o", "--output", required=True, type=_file_name,
                   help="the Parquet file to write (a folder, for a run's folder)")
    _add_window(x)
    _add_limits(x)
    x.set_defaults(func=_cmd_export)
    d = sub.add_parser(
        "diff", help="compare two traces: what got slower, and a regression gate for CI",
        description="Compare CANDIDATE with BASE: each per-step series (step time, busy time per category, "
                    "unaccounted time) as median, p90 and slowest step over the chosen steps, and every name's "
                    "count, self and wall time (a step, where both traces have steps; else in all), exact from "
                    "every event, largest change in self time first. With --fail-if, a regression gate: exit 1 "
                    "when a condition fails (one line each on stderr), 0 when all pass, 2 on bad input. Medians "
                    "over the steps are compared, so a slow step is not a regression.")
    d.add_argument("base", help="the baseline trace (any format tb-reduce reads), or a run's folder holding one")
    d.add_argument("candidate", help="the trace compared with it, or a run's folder holding one")
    d.add_argument("--steps", type=_step_range, default=None, metavar="FIRST:LAST",
                   help="only these step numbers, both included, in each trace (e.g. 10:50, 10: or :50)")
    d.add_argument("--base-steps", type=_step_range, default=None, metavar="FIRST:LAST",
                   help="the base's own step numbers (default: --steps): with the same trace twice, a step range of "
                        "it against another (tb-reduce diff T T --base-steps 10:20 --steps 40:50)")
    d.add_argument("--format", choices=("table", "csv", "json"), default="table",
                   help="output on stdout (default table)")
    d.add_argument("--limit", type=_positive, default=25, help="names shown in the table (default 25; CSV and JSON "
                                                               "hold every name)")
    d.add_argument("--fail-if", action="append", type=_condition, default=None, metavar="CONDITION",
                   help="step_time:+5%%, a series like unaccounted:+2ms, or name:REGEX:self|wall|count:+10%% "
                        "(REGEX in RE2 syntax; repeatable): exit 1 when the candidate's median exceeds the base's "
                        "by more")
    _add_limits(d)
    d.set_defaults(func=_cmd_diff)
    v = sub.add_parser(
        "live", help="the live sidecar: reduce trace windows as they land, keep raw ones around anomalies",
        description="Every trace file that lands under --watch (any profiler) is reduced into LOGDIR/live/<time>-<seq>/ "
                    "(a run the plugin shows; the newest --keep stay), its per-step series appended to TensorBoard "
                    "scalars in LOGDIR/live/series/<source>/ (one run per source), and its raw file kept in a ring "
                    "bounded by --ring-mb. When a trigger "
                    "fires (step:Kx, series:NAME:Kx, stall:DURATION, name:REGEX:DURATION; default step:2x and stall:250ms), "
                    "the raw "
                    "windows from --before to --after around it are kept as LOGDIR/live/<window>-anomaly-<time>-<kind>/ "
                    "with anomaly.json.")
    v.add_argument("--logdir", required=True, type=_file_name, help="TensorBoard's logdir (windows go to LOGDIR/live/)")
    v.add_argument("--source", choices=("watch", "torch", "jax"), default="watch",
                   help="where windows come from: watch, trace files appearing under --watch; jax or torch, the "
                        "windows tb_reduce_plugin.live.capture.jax_windows(FOLDER) or torch_schedule(FOLDER) capture "
                        "in the training script into --watch")
    v.add_argument("--watch", default=None, help="the folder the profiler writes traces into")
    v.add_argument("--every", type=_seconds, default=10.0,
                   help="how often a trace file still being written is reduced again as a partial window (default "
                        "10s); new and finished files are looked for every second")
    v.add_argument("--level", default="auto", help="reduction level of the windows (default auto)")
    v.add_argument("--keep", type=_positive, default=50, help="reduced windows kept (default 50)")
    v.add_argument("--ring-mb", type=_ring_megabytes, default=2048.0,
                   help=f"raw windows kept on disk, at most (MB, in whole disk blocks; at least {RING_MIN_MB:g})")
    v.add_argument("--trigger", action="append", default=None, metavar="SPEC", type=_trigger_spec,
                   help="step:2x, series:NAME:Kx (a waveforms series, e.g. series:communication_ms:1.5x), "
                        "baseline:SERIES:+MARGIN (with --baseline), stall:250ms or "
                        "name:REGEX:300ms, REGEX in RE2 syntax as the search's (repeatable; "
                        "any replaces the defaults)")
    v.add_argument("--baseline", default=None, metavar="RUN",
                   help="the run each window is compared with by baseline:SERIES:+MARGIN triggers (e.g. "
                        "baseline:step_time:+10%%), the run before a change: a trace, a folder holding one, or a run "
                        "of LOGDIR by its name")
    v.add_argument("--before", type=_seconds, default=10.0, help="raw time kept before an anomaly (default 10s)")
    v.add_argument("--after", type=_seconds, default=10.0, help="raw time kept after an anomaly (default 10s)")
    v.add_argument("--max-per-hour", type=_positive, default=6,
                   help="anomaly runs kept per trigger per hour, at most (default 6)")
    v.add_argument("--cooldown", type=_seconds, default=60.0, help="least time between two of one trigger (default 60s)")
    v.add_argument("--keep-anomalies", type=_positive, default=20, metavar="N",
                   help="anomaly runs kept, the newest (default 20); the oldest are deleted, one log line each")
    v.add_argument("--nice", type=_niceness, default=0, metavar="N",
                   help="run N niceness steps below the priority it is started at (default 0, the same: measured "
                        "beside a CPU torch loop on 2 cores, the sidecar cost its steps +0-2.5 %% at 0 and +9-13 %% "
                        "at 10, bench/bench_live_blocks.py)")
    _add_max_memory(v, "the memory reducing one window may use, at most: a window that needs more is refused "
                       "with a line, and the next one is read")
    v.set_defaults(func=_cmd_live)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help (0), or an argument error already reported in one line (2)
        return exc.code if isinstance(exc.code, int) else EXIT_BAD_INPUT
    try:
        return args.func(args)
    except TraceError as exc:
        print(f"tb-reduce: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as exc:  # the output or stats file: missing folder, read-only, disk full, ...
        reason = " ".join(str(exc.strerror or exc).split())
        where = f"cannot write {display_name(os.fsdecode(exc.filename))}: " if exc.filename is not None else ""
        print(f"tb-reduce: error: {where}{reason}", file=sys.stderr)
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
