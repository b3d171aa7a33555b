"""The one error type every surface turns into a one-line message.

Surfaces (CLI, plugin routes) must never show a traceback for bad input, so every
reader converts library exceptions (gzip, JSON, protobuf) into `TraceError` with a
message a user can act on.
"""


class NotFound(Exception):
    """No such run, host or event (the message says which)."""


class TraceError(ValueError):
    """The input is not a readable trace; `str(err)` is a one-line reason."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(str(message).split()))


# Errors about *which* file is read, not about its content: each asks for a different
# answer from a server (the service maps them to HTTP statuses), so each is its own type.


class NotRegularFile(TraceError):
    """The path is a FIFO, device, directory or socket: reading one can block forever
    (a FIFO with no writer), never end (/dev/zero) or make no sense, so it is refused
    before a byte is read."""


class FileChanged(TraceError):
    """The file is not the one that was listed or indexed (replaced, swapped for a
    symlink, truncated): what was found must be what is read, so the caller refreshes
    its listing instead of serving another file's bytes."""


class IndexDamaged(TraceError):
    """A file of a stored index was cut while the index was in use (`mapped.shrunk`, or a
    guarded read that met zeros): the index is dropped and whatever was read from it
    thrown away; the caller reads the trace again."""


class KeptTextDamaged(IndexDamaged):
    """A chunk of the text kept beside an index does not read back as written (changed on
    disk after it was checked): its source drops the kept text and the caller reads the
    trace again, as for a cut index file."""


class ObjectStoreError(TraceError):
    """An object store (an `s3://` or `gs://` logdir) could not be listed or read: not
    reachable, no such bucket, permission refused, its client not installed. The trace
    may be fine; the store is what failed, so a server answers it apart (502)."""


class InputTooLarge(TraceError):
    """The file, as opened (its `fstat`, not an older listing), is over the input limit."""

    def __init__(self, message: str, size: int = 0, limit: int = 0) -> None:
        super().__init__(message)
        self.size = size
        self.limit = limit


class InflationLimit(TraceError):
    """A gzip inflates past the absolute limit or far past what real traces compress to
    (a gzip bomb); refused while inflating, before the excess exists in memory."""

    def __init__(self, message: str, limit: int = 0) -> None:
        super().__init__(message)
        self.limit = limit


def _needs_escape(c: str) -> bool:
    """A control character (C0, DEL, C1) or a lone surrogate (an undecodable byte)."""
    code = ord(c)
    return code < 0x20 or 0x7F <= code <= 0x9F or 0xD800 <= code <= 0xDFFF


def display_name(name: str) -> str:
    """`name` as listings and messages show it: no control characters, valid UTF-8.

    File names may hold control characters (which the plugin refuses in parameters and
    which break one-line messages) and, on POSIX, bytes that are not UTF-8 (Python gives
    them as lone surrogates, which JSON-to-browser and `encodeURIComponent` cannot
    carry). Each such byte or character is written as `\\xNN` (`\\uNNNN` for a
    surrogate that is not an undecodable byte), so the name stays readable and tells
    what is there. Everything else is kept, other scripts, emoji and unusual spaces
    included: they are valid names that a browser sends back as they are. Not
    reversible (a name that holds a literal `\\x0a` looks the same), so listings keep
    their own mapping from shown names to paths and make the shown names unique.
    """
    if not any(_needs_escape(c) for c in name):
        return name
    out = []
    for c in name:
        if not _needs_escape(c):
            out.append(c)
            continue
        code = ord(c)
        if 0xDC80 <= code <= 0xDCFF:  # an undecodable byte, as `surrogateescape` gives it
            code -= 0xDC00
        out.append(f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}")
    return "".join(out)


class BadQuery(ValueError):
    """A search or range query that cannot be answered as asked (an empty or overlong
    query, control characters, a regular expression RE2 refuses, a limit out of range):
    the asker's mistake, not the trace's, so surfaces answer it apart from `TraceError`
    (400 in the plugin, not 422). `str(err)` is one line."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(str(message).split()))
