"""Comparing two traces: what got slower, and why (SPEC §9).

Two sides, each a trace and a range of its steps (`steps`): the per-step series of each
(step time, busy time per category, unaccounted time) summed up as distributions over
the chosen steps, and an exact per-name table of each (`query.aggregate` over the
steps' time range) joined by name (`diff`); a regression gate holds conditions against
them (`gate`), comparing medians over the steps so one slow step is not a regression.
Tables in, tables out: nothing here reads a file or knows a route.
"""
