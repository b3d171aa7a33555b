"""A comparison's document as text: the table a person reads, the CSV a script reads.

Times in the document are µs for names (as `aggregate` gives them) and ms for series;
here both show as ms. The table holds the `limit` names that changed most; CSV holds
them all, one row per series then one per name.
"""

from __future__ import annotations

from typing import Any, Optional

NAME_CHARS = 48


def table_text(doc: dict[str, Any], limit: Optional[int]) -> str:
    """The comparison as an aligned plain-text table."""
    out = [_side_line("base", doc["base"]), _side_line("candidate", doc["candidate"]), ""]
    if doc["series"]:
        out.append(f"{'per step':<26}{'base':>10}{'cand':>10}{'Δ':>10}{'ratio':>9}"
                   f"{'p90 base':>10}{'p90 cand':>10}  largest cand (step)")
        for r in doc["series"]:
            a, b = r["base"], r["candidate"]
            slowest = f"{_ms(b['slowest'])} ({b['slowest_step']})" if b else "-"
            label = f"{r['series']} ({r['unit']})"
            out.append(f"{label[:25]:<26}{_ms(a and a['median']):>10}{_ms(b and b['median']):>10}"
                       f"{_signed(r['delta']):>10}{_ratio(r['ratio']):>9}"
                       f"{_ms(a and a['p90']):>10}{_ms(b and b['p90']):>10}  {slowest}")
        out.append("")
    names = doc["names"]
    shown = names if limit is None else names[:limit]
    per = "a step" if doc["per_step"] else "in all (a side has no steps)"
    more = f" ({len(shown)} of {len(names)} names; --limit)" if len(shown) < len(names) else ""
    out.append(f"names, {per}, largest change in self time first{more}")
    out.append(f"{'name':<{NAME_CHARS}}{'count':>9}{'':>9}{'self ms':>10}{'':>10}{'Δ self':>10}{'ratio':>9}"
               f"{'wall ms':>10}{'':>10}{'max ms':>9}{'':>9}")
    out.append(f"{'':<{NAME_CHARS}}{'base':>9}{'cand':>9}{'base':>10}{'cand':>10}{'':>10}{'':>9}"
               f"{'base':>10}{'cand':>10}{'base':>9}{'cand':>9}")
    for r in shown:
        a, b = r["base"] or {}, r["candidate"] or {}
        name = _clip(r["name"]) + (f" [only in {r['only_in']}]" if r["only_in"] else "") + (
            " [marker]" if r.get("marker") else "")
        out.append(f"{name:<{NAME_CHARS}}{_count(a.get('count')):>9}{_count(b.get('count')):>9}"
                   f"{_ms(_us_ms(a.get('self_us'))):>10}{_ms(_us_ms(b.get('self_us'))):>10}"
                   f"{_signed(r['delta_self_us'] / 1e3):>10}{_ratio(r['ratio_self']):>9}"
                   f"{_ms(_us_ms(a.get('wall_us'))):>10}{_ms(_us_ms(b.get('wall_us'))):>10}"
                   f"{_ms(_us_ms(a.get('max_us'))):>9}{_ms(_us_ms(b.get('max_us'))):>9}")
    return "\n".join(out) + "\n"


CSV_HEADER = ["kind", "name", "unit", "base", "candidate", "delta", "ratio", "base_count", "candidate_count",
              "only_in"]


def csv_rows(doc: dict[str, Any]) -> list[list[Any]]:
    """One row per series (medians a step, ms or MB), then one per name (self time, ms; a step
    where both sides have steps), as `CSV_HEADER` names the columns."""
    rows: list[list[Any]] = []
    for r in doc["series"]:
        a, b = r["base"], r["candidate"]
        rows.append(["series", r["series"], f"median {r['unit']} per step", a and a["median"], b and b["median"],
                     r["delta"], r["ratio"], a and a["steps"], b and b["steps"], ""])
    unit = "self ms per step" if doc["per_step"] else "self ms"
    for r in doc["names"]:
        a, b = r["base"], r["candidate"]
        rows.append(["name", r["name"], unit, _us_ms(a and a["self_us"]), _us_ms(b and b["self_us"]),
                     r["delta_self_us"] / 1e3, r["ratio_self"], a and a["count"], b and b["count"],
                     r["only_in"] or ""])
    return rows


def _side_line(role: str, side: dict[str, Any]) -> str:
    if side["steps"]:
        steps = f"{side['steps']} steps ({side['marker']}), {side['first_step']} to {side['last_step']}"
    else:
        steps = f"no steps ({side['no_steps']}): the whole trace"
    return f"{role + ':':<11}{side['trace']}: {steps}"


def _clip(name: str) -> str:
    name = " ".join(name.split())  # a name is one line of the table, whatever it holds
    return name if len(name) <= NAME_CHARS - 2 else name[:NAME_CHARS - 3] + "…"


def _us_ms(x: Optional[float]) -> Optional[float]:
    return None if x is None else x / 1e3


def _ms(x: Optional[float]) -> str:
    if x is None or x != x:
        return "-"
    return f"{x:.3f}" if abs(x) < 100 else f"{x:,.1f}"


def _signed(x: Optional[float]) -> str:
    if x is None or x != x:
        return "-"
    return f"{x:+.3f}" if abs(x) < 100 else f"{x:+,.1f}"


def _ratio(x: Optional[float]) -> str:
    if x is None or x != x:
        return "-"
    return f"{x:.2f}x" if x < 100 else f"{x:,.0f}x"


def _count(x: Optional[float]) -> str:
    if x is None:
        return "-"
    return f"{x:g}" if x == int(x) and abs(x) < 1e9 else f"{x:.1f}"
