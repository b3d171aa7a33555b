"""The per-step spread across hosts: `waveforms?run=&hosts=a,b|*`.

A job's hosts run the same steps; the one that is slow holds the others at the next
collective, so the question a multi-host profile answers first is *which host, which
step*. Each host's own per-step series (`waveforms.steps`, the single-host route's
answer) is lined up with the others by step number, and per step and per series
(`step_time_ms`, each `<category>_ms`) the answer gives the least, the median and the
most across the hosts that ran the step, the host with the most (the straggler), and
every host's own value.

`spread` is a pure function of the per-host answers (numpy over a steps × hosts matrix
per series, no loop per value); `host_waveforms` gathers them from the service, which is
passed in (this module sits below it), each host in a computation slot of its own. A
host whose steps cannot be derived (unreadable file, no step markers) is reported with
its reason, and the others are still answered.

Rules: a step number a host writes twice (a trace that restarts its count) is taken at
its first occurrence and the host's entry counts the `repeated` ones; a value a host
does not have (it did not run the step; a series only device traces have) is null and
left out of the statistics; ties for the most go to the host listed first.
"""

from __future__ import annotations

import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Optional, Sequence

import numpy as np

from ..budget import BudgetBusy
from ..errors import TraceError

STEP_TIME = "step_time_ms"


def _series_of(doc: dict) -> list[str]:
    names = doc.get("series")
    return [s for s in names if isinstance(s, str)] if isinstance(names, list) else []


def _value(step: dict, series: str) -> float:
    """A step's value of `series` from the single-host shape (`StepSeries.to_json`), NaN if none."""
    if series == STEP_TIME:
        v = step.get(STEP_TIME)
    elif series.startswith("memory_peak_mb_"):
        memory = step.get("memory_mb")
        v = memory.get(series) if isinstance(memory, dict) else None
    else:
        busy = step.get("busy_ms")
        v = busy.get(series[:-3]) if isinstance(busy, dict) and series.endswith("_ms") else None
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else np.nan


def _json_list(a: np.ndarray) -> list:
    """Floats with NaN as null (strict JSON); each host's values are passed on as it gave them."""
    return [None if x != x else x for x in a.tolist()]


def spread(hosts: Sequence[dict]) -> dict[str, Any]:
    """The spread of the hosts' per-step series.

    `hosts`: one entry per host in the run's order, `{"host", "rank", "waveforms": <the
    single-host waveforms answer> | None, "error": str | None}`. Returns `{"hosts": [{host,
    rank, marker, steps, repeated, reason?, error?}], "series": [...], "steps": [{"step",
    "hosts": how many ran it, "start_us": [per host, its own clock], "end_us": [...],
    "series": {name: {"min", "median", "max", "straggler": host, "values": [per host]}}}]}`.
    """
    series: list[str] = []
    entries = []
    per_host: list[tuple[dict[float, int], list[dict]]] = []
    for h in hosts:
        doc = h.get("waveforms") if isinstance(h.get("waveforms"), dict) else None
        entry: dict[str, Any] = {"host": h["host"], "rank": h.get("rank"), "marker": None, "steps": 0, "repeated": 0}
        first: dict[float, int] = {}
        steps: list[dict] = []
        if h.get("error"):
            entry["error"] = h["error"]
        elif doc is not None:
            steps = [s for s in doc.get("steps") or [] if isinstance(s, dict)]
            entry["marker"] = doc.get("marker")
            if doc.get("reason") and not steps:
                entry["reason"] = doc["reason"]
            for name in _series_of(doc):
                if name not in series:
                    series.append(name)
            for i, s in enumerate(steps):
                n = s.get("step")
                if isinstance(n, (int, float)) and not isinstance(n, bool) and n == n:
                    first.setdefault(float(n), i)
            entry["steps"] = len(first)
            entry["repeated"] = len(steps) - len(first)
        entries.append(entry)
        per_host.append((first, steps))
    numbers = np.asarray(sorted({n for first, _ in per_host for n in first}), dtype=np.float64)
    n_steps, n_hosts = len(numbers), len(hosts)
    # where[s, h]: the row of step s in host h's own series, -1 where h did not run it
    where = np.full((n_steps, n_hosts), -1, dtype=np.int64)
    for j, (first, _) in enumerate(per_host):
        if first:
            keys = np.fromiter(first.keys(), dtype=np.float64, count=len(first))
            rows = np.fromiter(first.values(), dtype=np.int64, count=len(first))
            where[np.searchsorted(numbers, keys), j] = rows
    ran = where >= 0

    def matrix(get: Any) -> np.ndarray:
        m = np.full((n_steps, n_hosts), np.nan)
        for j, (_, steps) in enumerate(per_host):
            col = np.asarray([get(s) for s in steps], dtype=np.float64)  # one value per step a host wrote
            if len(col):
                m[ran[:, j], j] = col[where[ran[:, j], j]]
        return m

    def us(key: str) -> Any:
        def get(s: dict) -> float:
            v = s.get(key)
            return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else np.nan
        return get

    starts, ends = matrix(us("start_us")), matrix(us("end_us"))
    stats = {}
    names = [h["host"] for h in hosts]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a step no host has a value of: all-NaN rows
        for name in series:
            m = matrix(lambda s, name=name: _value(s, name))
            has = ~np.isnan(m).all(axis=1)
            lo, mid, hi = np.nanmin(m, axis=1), np.nanmedian(m, axis=1), np.nanmax(m, axis=1)
            top = np.argmax(np.where(np.isnan(m), -np.inf, m), axis=1)  # the first host of the most
            stats[name] = (m, lo, mid, hi, [names[t] if ok else None for t, ok in zip(top.tolist(), has.tolist())])
    out_steps = []
    ran_count = ran.sum(axis=1).tolist()
    lists = {name: (_json_list(lo), _json_list(mid), _json_list(hi), strag, [_json_list(row) for row in m])
             for name, (m, lo, mid, hi, strag) in stats.items()}
    start_rows, end_rows = [_json_list(r) for r in starts], [_json_list(r) for r in ends]
    for i, n in enumerate(numbers.tolist()):
        out_steps.append({
            "step": int(n) if n.is_integer() else n, "hosts": ran_count[i],
            "start_us": start_rows[i], "end_us": end_rows[i],
            "series": {name: {"min": lo[i], "median": mid[i], "max": hi[i], "straggler": strag[i], "values": vals[i]}
                       for name, (lo, mid, hi, strag, vals) in lists.items()},
        })
    return {"hosts": entries, "series": series, "steps": out_steps}


def host_waveforms(service: Any, run: str, spec: str) -> dict[str, Any]:
    """The spread of the hosts `spec` names in `run` (`hosts=a,b|*`, resolved as a merged view
    resolves them), each host's series derived by the service as its single-host route does.
    A host that fails is reported with its reason; when every host fails, the first error is
    raised (the route's answer is then that error's status)."""
    files = service.merged.files(run, spec)
    errors: list[Optional[BaseException]] = [None] * len(files)

    def one(i: int) -> Optional[dict]:
        try:
            return service.waveforms(run, files[i][1].host)
        except BudgetBusy:
            raise  # the server is busy, not the host unreadable: the whole answer is asked again
        except (TraceError, MemoryError) as exc:
            errors[i] = exc
            return None

    workers = max(1, min(len(files), service.gate.workers))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tb-reduce-spread") as pool:
        docs = list(pool.map(one, range(len(files))))
    if all(e is not None for e in errors):
        raise errors[0]  # type: ignore[misc]
    parts = [{"host": tf.host, "rank": rank, "waveforms": doc,
              "error": f"{type(exc).__name__}: {exc}" if exc is not None else None}
             for (rank, tf), doc, exc in zip(files, docs, errors)]
    return {"run": run, **spread(parts)}
