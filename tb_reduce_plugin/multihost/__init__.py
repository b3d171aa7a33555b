"""Several hosts of one run as one timeline: their clocks (`clock`), which hosts a
request names (`selection`) and the merge of their reductions (`merge`).

A merged view is built from each host's own reduction (a pure function of the file, the
level, the host's part of the window and its share of the buckets, cached as any other),
so the per-host work can run anywhere; only the merge, cheap next to it, runs here.
"""
