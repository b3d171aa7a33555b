"""The one error type every surface turns into a one-line message.

Surfaces (CLI, plugin routes) must never show a traceback for bad input, so every
reader converts library exceptions (gzip, JSON, protobuf) into `TraceError` with a
message a user can act on.
"""


class TraceError(ValueError):
    """The input is not a readable trace; `str(err)` is a one-line reason."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(str(message).split()))
