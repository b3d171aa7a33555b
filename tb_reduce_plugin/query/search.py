"""Search event names over the whole trace: every slice and instant, folded or not.

A reduced view holds a few percent of a big trace's events; the index holds them all,
so a search answers from the index and finds what a view folded into summaries.

Cost is bounded by what is distinct, not by the events: the query is matched once
against each distinct (interned) name, and events are then selected with a boolean
look-up table indexed by the name column — one gather over the searchable events,
which are kept sorted by time once per table, so hits come out in time order without
a sort per request. Regular expressions and case-insensitive queries run on RE2
(linear time: no pattern can make a name take exponential time, `(a+)+$` included),
and matching stops at `MATCH_SECONDS` however many distinct names a hostile trace has
(the answer then says it is incomplete).

What is searched, and the exact rules: docs/SEMANTICS.md, "Search and range statistics".
"""

from __future__ import annotations

import json
import re
import time
import unicodedata
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional

import numpy as np
import re2

from ..errors import BadQuery, TraceError
from ..index.prepared import prepared_of
from ..model.mapped import Appended
from ..model.slices import SliceTable
from ..model.sorting import order_by, row_dtype, sample_bytes
from ..model.table import INSTANT_PHASES, EventTable, ph_in
from ..reduce.plan import check_window, slices_bytes
from ..reduce.shared import CHUNK_EVENTS as CHUNK_ROWS
from ..reduce.shared import slices_of

MAX_QUERY_CHARS = 1000
DEFAULT_LIMIT = 1000
MAX_LIMIT = 10_000
MATCH_SECONDS = 2.0  # matching distinct names stops here (a hostile trace's millions of names)
RE2_MAX_MEM = 8 << 20  # RE2's own default: a pattern that needs more is refused at compile time
_CHUNK = 8192  # names matched between looks at the clock
# Working memory of a search, charged to the memory budget before it runs (measured with
# tracemalloc, `test_query_search`): a warm search reads the time order a chunk of rows at
# a time (~30 B a row of one chunk, plus 1 B an event); the first builds that order — ~48 B
# an event in memory, a chunk's worth into the table's scratch folder when it has one —
# and, when no view has yet, the slices (`plan.slices_bytes`).
WARM_BYTES_PER_EVENT = 1
CHUNK_BYTES_PER_ROW = 48
HIT_BYTES = 400  # a hit of the page, as the dict the answer holds (274 B measured), and its row
FIRST_BYTES_PER_EVENT = 48
FIRST_SPILLED_BYTES_PER_EVENT = 2


@dataclass(frozen=True)
class NameQuery:
    """A validated query: `matches(names)` says which of a list of names it finds."""

    text: str
    regex: bool
    icase: bool
    _hit_text: Optional[Callable[[str], bool]]  # plain case-sensitive substring: on str, no encoding
    _hit_bytes: Optional[Callable[[bytes], bool]]  # RE2: on UTF-8

    def matches(self, names: list, seconds: Optional[float] = None) -> tuple[np.ndarray, int]:
        """A boolean per name (by id), and how many names were looked at before the
        clock ran out (`MATCH_SECONDS`; all of them, normally). Names are matched as
        text (`name_text`)."""
        n = len(names)
        found = np.zeros(n, dtype=bool)
        deadline = time.monotonic() + (MATCH_SECONDS if seconds is None else seconds)
        done = 0
        while done < n:
            texts = [name_text(v) for v in names[done:done + _CHUNK]]
            if self._hit_text is not None:
                hit = self._hit_text
                found[done:done + len(texts)] = np.fromiter(map(hit, texts), dtype=bool, count=len(texts))
            else:
                hit_b = self._hit_bytes
                assert hit_b is not None
                encoded = [s.encode("utf-8", "replace") for s in texts]
                found[done:done + len(texts)] = np.fromiter(map(hit_b, encoded), dtype=bool, count=len(texts))
            done += len(texts)
            if done < n and time.monotonic() > deadline:
                break
        return found, done


def name_text(value: Any) -> str:
    """An event name as searched and reported: a string as it is, a missing name as "",
    anything else (a number, which Chrome JSON allows) as its JSON text."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    try:
        return json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return str(value)


def _refused_character(q: str) -> Optional[str]:
    for c in q:
        if unicodedata.category(c) in ("Cc", "Cs"):  # C0, DEL, C1 controls; lone surrogates
            return f"U+{ord(c):04X}"
    return None


def compile_query(q: Any, regex: bool = False, icase: bool = False) -> NameQuery:
    """Validate and compile a name query; `BadQuery` says what is wrong with it.

    Plain case-sensitive queries are substring tests in C on the names as they are; a
    regex or a case-insensitive query is compiled by RE2 (a plain one as a literal), so
    the two are matched by one engine with one notion of case (Unicode simple folding).
    """
    if not isinstance(q, str) or not q:
        raise BadQuery("the query is empty: give q, 1 to 1000 characters")
    if len(q) > MAX_QUERY_CHARS:
        raise BadQuery(f"the query is {len(q):,} characters long; at most {MAX_QUERY_CHARS:,} are taken")
    bad = _refused_character(q)
    if bad is not None:
        raise BadQuery(f"the query holds a control character ({bad}); names are searched as text")
    if not regex and not icase:
        return NameQuery(q, False, False, lambda name: q in name, None)
    options = re2.Options()
    options.case_sensitive = not icase
    options.literal = not regex
    options.never_capture = True  # only whether a name matches is asked: no groups to track
    options.log_errors = False  # a user's bad pattern is answered, not logged to stderr
    options.max_mem = RE2_MAX_MEM
    try:
        compiled = re2.compile(q, options)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise BadQuery(f"not a regular expression RE2 takes: {reason} (RE2 syntax: no backreferences "
                       f"or look-around)") from None
    return NameQuery(q, regex, icase, None, _re2_hit(compiled))


# {n}, {n,}, {n,m}: repetition counts, as RE2 writes them (`compile_regex`).
_REPEAT = re.compile(r"\{(\d+(?:,\d*)?)\}")


def compile_regex(pattern: str) -> NameQuery:
    """A regular expression a user names names by on the command line (a live trigger's
    `name:REGEX:…`, a gate's `--fail-if name:REGEX:…`): compiled by RE2 as the search
    route compiles a regex query, and refused (`BadQuery`) where RE2 would quietly read it
    otherwise than meant. RE2 reads a repetition count too big for an int
    (`a{99999999999}`) as literal text, though it refuses `a{1001}`: compiled with such
    counts cut to 1001, a pattern that fails meant them as a repetition (escaped or in a
    class, `{...}` stays literal and the probe compiles)."""
    query = compile_query(pattern, regex=True)
    probe = _REPEAT.sub(lambda m: "{" + ",".join(n if len(n) <= 4 else "1001" for n in m.group(1).split(",")) + "}",
                        pattern)
    if probe != pattern:
        try:
            compile_query(probe, regex=True)
        except BadQuery:
            raise BadQuery("not a regular expression RE2 takes: a repetition count is over 1000 (RE2's limit)") from None
    return query


def _re2_hit(compiled: Any) -> Callable[[bytes], bool]:
    """A fast yes/no search: RE2's own `Match` on bytes (no match object built), where
    this version of the binding exposes it; else its public `search`."""
    raw = getattr(compiled, "_regexp", None)
    anchor = getattr(getattr(re2, "_Anchor", None), "UNANCHORED", None)
    if raw is not None and anchor is not None and hasattr(raw, "Match"):
        match = raw.Match

        def hit(b: bytes) -> bool:
            return match(anchor, b, 0, len(b))[0][0] >= 0

        return hit
    return lambda b: compiled.search(b) is not None


@dataclass
class _Searchable:
    """The events a search looks at, in time order (ts, then input index): their input
    index, and their row in the slice table (-1 for an instant)."""

    event: np.ndarray
    row: np.ndarray


def searchable_of(t: EventTable) -> _Searchable:
    """Slices (X, and the B of each matched B/E pair) and instants (i, I, R) with a time,
    sorted by (ts, input index): prepared once per table (`prepared.Prepared.searchable`,
    whose memory the index counts)."""
    p = prepared_of(t)
    state = p.searchable
    if state is None:
        state = p.searchable = _build_searchable(t, slices_of(t))
    return state


def _build_searchable(t: EventTable, sl: SliceTable) -> _Searchable:
    """The rows and their time order made a chunk at a time, into the table's scratch
    folder when it has one (`sorting.order_by`): the order `np.lexsort((event, ts))` gives
    (input indices are distinct), never sorting every row at once."""
    folder = t.scratch
    rows = Appended(folder, {"event": np.int64, "ts": np.float64, "row": np.int64}, "the search's rows")
    for c in _chunks(len(sl)):
        rows.append({"event": sl.event[c], "ts": sl.start[c], "row": np.arange(c.start, c.stop, dtype=np.int64)})
    for c in _chunks(len(t)):
        ph, ts = np.asarray(t.ph[c]), np.asarray(t.ts[c])
        inst = np.flatnonzero(ph_in(ph, INSTANT_PHASES) & ~np.isnan(ts))
        rows.append({"event": inst + c.start, "ts": ts[inst], "row": np.full(len(inst), -1, dtype=np.int64)})
    cols = rows.finish()
    order = order_by(cols["ts"], cols["event"], None, folder, CHUNK_ROWS, "the search's time order")
    index_type = row_dtype(len(t))
    out = Appended(folder, {"event": index_type, "row": index_type}, "the search's time order")
    for c in _chunks(len(order)):
        at = np.asarray(order[c])
        out.append({"event": cols["event"][at], "row": cols["row"][at]})
    done = out.finish()
    return _Searchable(event=done["event"], row=done["row"])


def _chunks(n: int) -> Iterator[slice]:
    for a in range(0, n, CHUNK_ROWS):
        yield slice(a, min(a + CHUNK_ROWS, n))


def working_bytes(t: EventTable) -> int:
    """What a search of `t` may hold at its peak, counting the state it would prepare first."""
    return peak_bytes(t, WARM_BYTES_PER_EVENT, FIRST_SPILLED_BYTES_PER_EVENT if t.scratch is not None
                      else FIRST_BYTES_PER_EVENT, "searchable")


def peak_bytes(t: EventTable, warm: int, first: int, state: str) -> int:
    """`warm` bytes an event, a chunk of rows and the largest page, plus `first` an event (and another chunk)
    when the prepared state `state` (a field of `prepared.Prepared`) is still to be made,
    plus what making the slices holds when no view or query made them."""
    n = len(t)
    need = warm * n + CHUNK_BYTES_PER_ROW * min(n, CHUNK_ROWS) + HIT_BYTES * MAX_LIMIT
    if not prepared_of(t).ready(state):
        need += first * n + CHUNK_BYTES_PER_ROW * min(n, CHUNK_ROWS) + sample_bytes(n)
    return need + slices_bytes(t)


def check_page(limit: int, offset: int, max_limit: int = MAX_LIMIT) -> None:
    if not 1 <= limit <= max_limit:
        raise BadQuery(f"limit must be 1 to {max_limit:,}, not {limit}")
    if offset < 0:
        raise BadQuery(f"offset must be 0 or more, not {offset}")


def check_range(start_us: Optional[float], end_us: Optional[float]) -> Optional[tuple[float, float]]:
    """The window as (start, end), or None for the whole trace; `BadQuery` if half given or invalid."""
    if start_us is None and end_us is None:
        return None
    if start_us is None or end_us is None:
        raise BadQuery("give both start_us and end_us, or neither")
    try:
        check_window(start_us, end_us)
    except TraceError as exc:
        raise BadQuery(str(exc)) from None
    return float(start_us), float(end_us)


def search(t: EventTable, query: NameQuery, start_us: Optional[float] = None, end_us: Optional[float] = None,
           limit: int = DEFAULT_LIMIT, offset: int = 0) -> dict:
    """The events whose name matches `query`, in time order, one page of them.

    A slice is in the window when it overlaps it (ts <= end_us and its end >= start_us),
    an instant when its ts is in it. `total` counts every hit; `hits` is the page
    [offset, offset + limit). `names` counts the distinct names among all hits.
    """
    window = check_range(start_us, end_us)
    check_page(limit, offset)
    matched, scanned = query.matches(t.names)
    state = searchable_of(t)
    sl = slices_of(t)
    total, page = 0, []
    named = np.zeros(len(t.names), dtype=bool)  # the names of the hits
    if matched.any():
        for c in _chunks(len(state.event)):  # a chunk of rows at a time: the same hits, in the same order
            pos = np.flatnonzero(matched[t.name[np.asarray(state.event[c])]]) + c.start
            if window is not None and len(pos):
                ev, row = state.event[pos], state.row[pos]
                ts = t.ts[ev]
                end = np.where(row >= 0, sl.end[np.maximum(row, 0)], ts)
                pos = pos[(ts <= window[1]) & (end >= window[0])]
            if total + len(pos) > offset and total < offset + limit:
                page.append(pos[max(0, offset - total):offset + limit - total])
            named[t.name[state.event[pos]]] = True
            total += len(pos)
    distinct = int(np.count_nonzero(named))
    page = np.concatenate(page) if page else np.zeros(0, dtype=np.int64)
    return {
        "q": query.text,
        "regex": query.regex,
        "icase": query.icase,
        "window": list(window) if window is not None else None,
        "total": total,
        "names": distinct,
        "offset": offset,
        "limit": limit,
        "complete": scanned == len(t.names),
        "names_scanned": scanned,
        "names_total": len(t.names),
        "hits": _hits(t, sl, state.event[page], state.row[page]),
    }


def _hits(t: EventTable, sl: SliceTable, events: np.ndarray, rows: np.ndarray) -> list[dict]:
    """One dict per hit (a page: at most `MAX_LIMIT`), values as JSON takes them."""
    out = []
    dur = np.where(rows >= 0, sl.dur[np.maximum(rows, 0)], np.nan)
    for i, d in zip(events.tolist(), dur.tolist()):
        track = int(t.track[i])
        pid, tid = t.tracks[track]
        out.append({
            "i": i,
            "name": name_text(t.names[t.name[i]]),
            "ph": chr(int(t.ph[i])),
            "ts": float(t.ts[i]),
            "dur": None if d != d else d,
            "pid": pid,
            "tid": tid,
            "process": t.process_names.get(pid),
            "thread": t.thread_names.get(track),
        })
    return out
