"""Reduction: a window of the event model cut into buckets and written at a level.

`levels` (bucket counts and what args each level keeps), `reduction` (the plan: which
events a view keeps, what it folds into summaries), `busy` (how busy a summary's
buckets are), `writer` (the kept events and summaries as Chrome trace JSON) and
`pipeline` (a trace file in, its index and its reduced views out). Below `serve/`,
above `formats/`, `index/` and the event model; nothing here imports `serve/`.
"""
