"""Questions answered from the whole trace's index, not from a reduced view.

A view keeps a few percent of a big trace's events; the index (`pipeline.TraceIndex`)
keeps them all as columns. `search` finds events by name among all of them (folded
ones included); `aggregate` gives exact per-name statistics of a time range; `nesting`
gives the direct parent of each slice, which self time needs. Pure functions over an
`EventTable` returning plain dicts; errors are `errors.BadQuery`. Rules:
docs/SEMANTICS.md, "Search and range statistics".

The modules are imported by name (`query.search.search`, `query.aggregate.aggregate`):
nothing is re-exported here, so a module and its main function never shadow each other.
"""
