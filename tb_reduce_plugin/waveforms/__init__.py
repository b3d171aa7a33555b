"""Series for the dashboard's waveform panels (SPEC §8).

- `eventfile`: reads TFRecord-framed event files, recovering from damage (gaps reported) and tailing live writers.
- `scalars`: the scalar series of a run's event files, in columns, read incrementally.
- `smoothing`: TensorBoard's debiased exponential smoothing (`classicSmoothing`), operation for operation.
"""
