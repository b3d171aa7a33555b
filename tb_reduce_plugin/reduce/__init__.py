"""Reduction: a window of the event model cut into buckets and written at a level.

`levels` (bucket counts and what args each level keeps), `plan` (the plan: which
events a view keeps), `busy` (how busy a summary's buckets are), `writer` (the kept
events and summaries as Chrome trace JSON) and `pipeline` (a trace file in, its index
and its reduced views out). The plan applies the rule of each kind of event from the
modules below it, which never import it: `summaries` (what it folds into summaries),
`points` (counters and instants) and `flows`, over what they share of a table
(`shared`) and the view's bucket grid (`buckets`). Below `serve/`, above `formats/`,
`index/` and the event model; nothing here imports `serve/`.
"""
