"""Series for the dashboard's waveform panels (SPEC §8).

- `steps`: per-step series derived from a trace (step time, busy time per category), from real step markers.
- `categories`: the rule table that says what kind of work a slice is, behind the busy series.
- `eventfile`: reads TFRecord-framed event files, recovering from damage (gaps reported) and tailing live writers.
- `scalars`: the scalar series of a run's event files, in columns, read incrementally.
- `smoothing`: TensorBoard's debiased exponential smoothing (`classicSmoothing`), operation for operation.
"""
