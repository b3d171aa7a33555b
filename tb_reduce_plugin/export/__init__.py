"""The event model written out for the tools people already query with (SPEC §9).

`rows` turns an event table into the export's columns a chunk of events at a time;
`parquet` streams those chunks into an Apache Parquet file, one row group each.
"""
