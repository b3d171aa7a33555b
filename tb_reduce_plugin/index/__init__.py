"""The index of a trace kept on disk: what one parse found, reopened without parsing again.

`store`: a Chrome trace's event table (its columns, interned strings, counter and step
side tables) and the byte positions of its events in the file, written once per file
version into the cache directory and memory-mapped when it is opened again — by a
restarted server, a second server over the same cache or the command line with
`--cache-dir`. Refusals (a file that cannot be read within the limits) are kept there
too, so a restart does not pay for finding them again.
"""
