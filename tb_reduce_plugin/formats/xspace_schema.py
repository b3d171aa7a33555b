"""Our own protobuf schema for XSpace, wire-compatible with XProf's `xplane.proto`.

Built from a `FileDescriptorProto` at import time, so neither `protoc` nor XProf
nor TensorFlow is needed: message names, field names and numbers are public facts
of the format. The classes run on protobuf's C parser (upb).

Three views of the same bytes:
- `XSpace` and friends: the schema as XProf writes it (text as `string`), for
  writing XSpaces (tests) and nothing the reader parses.
- `XSpaceView` and friends (`XEventView` …): identical, except that every `string`
  is read as `bytes` (the same wire format). upb validates the UTF-8 of proto3
  strings and refuses the whole message at one bad byte; read as bytes, text is
  decoded where it becomes text with the one rule every input follows here,
  `bytes.decode("utf-8", "replace")`. `XEventView` gives a kept event's stats.
- `XSpaceIndexView`: `XSpaceView`, except that a line's events are read as `bytes`.
  upb then walks the file in C and hands each event over as its raw payload, which
  `xspace.decode_event_columns` decodes for millions of events at once in numpy;
  a Python attribute walk over them would cost ~4x more time and ~2x the memory.
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

PACKAGE = "tb_reduce.xspace"
_F = descriptor_pb2.FieldDescriptorProto
_OPT, _REP = _F.LABEL_OPTIONAL, _F.LABEL_REPEATED
_I64, _U64, _DBL, _STR, _BYTES, _MSG = (
    _F.TYPE_INT64, _F.TYPE_UINT64, _F.TYPE_DOUBLE, _F.TYPE_STRING, _F.TYPE_BYTES, _F.TYPE_MESSAGE,
)

# (message, [(field, number, type, label, message type or None, oneof or None)])
_MESSAGES: list[tuple[str, list[tuple]]] = [
    ("XSpace", [
        ("planes", 1, _MSG, _REP, "XPlane", None),
        ("errors", 2, _STR, _REP, None, None),
        ("warnings", 3, _STR, _REP, None, None),
        ("hostnames", 4, _STR, _REP, None, None),
    ]),
    ("XPlane", [
        ("id", 1, _I64, _OPT, None, None),
        ("name", 2, _STR, _OPT, None, None),
        ("lines", 3, _MSG, _REP, "XLine", None),
        ("event_metadata", 4, _MSG, _REP, "XPlane.EventMetadataEntry", None),
        ("stat_metadata", 5, _MSG, _REP, "XPlane.StatMetadataEntry", None),
        ("stats", 6, _MSG, _REP, "XStat", None),
    ]),
    ("XLine", [
        ("id", 1, _I64, _OPT, None, None),
        ("display_id", 10, _I64, _OPT, None, None),
        ("name", 2, _STR, _OPT, None, None),
        ("display_name", 11, _STR, _OPT, None, None),
        ("timestamp_ns", 3, _I64, _OPT, None, None),
        ("duration_ps", 9, _I64, _OPT, None, None),
        ("events", 4, _MSG, _REP, "XEvent", None),
    ]),
    ("XEvent", [
        ("metadata_id", 1, _I64, _OPT, None, None),
        ("offset_ps", 2, _I64, _OPT, None, "data"),
        ("num_occurrences", 5, _I64, _OPT, None, "data"),
        ("duration_ps", 3, _I64, _OPT, None, None),
        ("stats", 4, _MSG, _REP, "XStat", None),
    ]),
    ("XStat", [
        ("metadata_id", 1, _I64, _OPT, None, None),
        ("double_value", 2, _DBL, _OPT, None, "value"),
        ("uint64_value", 3, _U64, _OPT, None, "value"),
        ("int64_value", 4, _I64, _OPT, None, "value"),
        ("str_value", 5, _STR, _OPT, None, "value"),
        ("bytes_value", 6, _BYTES, _OPT, None, "value"),
        ("ref_value", 7, _U64, _OPT, None, "value"),
    ]),
    ("XEventMetadata", [
        ("id", 1, _I64, _OPT, None, None),
        ("name", 2, _STR, _OPT, None, None),
        ("display_name", 4, _STR, _OPT, None, None),
        ("metadata", 3, _BYTES, _OPT, None, None),
        ("stats", 5, _MSG, _REP, "XStat", None),
        ("child_id", 6, _I64, _REP, None, None),
    ]),
    ("XStatMetadata", [
        ("id", 1, _I64, _OPT, None, None),
        ("name", 2, _STR, _OPT, None, None),
        ("description", 3, _STR, _OPT, None, None),
    ]),
]
_MAPS = {"XPlane": [("EventMetadataEntry", "XEventMetadata"), ("StatMetadataEntry", "XStatMetadata")]}
# The text-as-bytes view: every message again, under other names, strings as bytes.
_TEXT_VIEW = {name: name + "View" for name, _ in _MESSAGES}
# The index view: the text view, except that a line's events are raw bytes.
_VIEW = {"XSpace": "XSpaceIndexView", "XPlane": "XPlaneIndexView", "XLine": "XLineIndexView"}


def _add_message(fd: descriptor_pb2.FileDescriptorProto, name: str, fields: list[tuple], rename: dict[str, str],
                 raw_events: bool, text_as_bytes: bool = False) -> None:
    m = fd.message_type.add(name=rename.get(name, name))
    oneofs: list[str] = []
    for fname, number, ftype, label, type_name, oneof in fields:
        if raw_events and name == "XLine" and fname == "events":
            ftype, type_name = _BYTES, None
        if text_as_bytes and ftype == _STR:
            ftype = _BYTES
        f = m.field.add(name=fname, number=number, type=ftype, label=label)
        if type_name:
            head, _, tail = type_name.partition(".")
            f.type_name = f".{PACKAGE}.{rename.get(head, head)}" + (f".{tail}" if tail else "")
        if oneof:
            if oneof not in oneofs:
                oneofs.append(oneof)
                m.oneof_decl.add(name=oneof)
            f.oneof_index = oneofs.index(oneof)
    for entry, value in _MAPS.get(name, []):
        e = m.nested_type.add(name=entry)
        e.options.map_entry = True
        e.field.add(name="key", number=1, type=_I64, label=_OPT)
        e.field.add(name="value", number=2, type=_MSG, label=_OPT, type_name=f".{PACKAGE}.{rename.get(value, value)}")


def _file() -> descriptor_pb2.FileDescriptorProto:
    fd = descriptor_pb2.FileDescriptorProto(name="tb_reduce/xspace.proto", package=PACKAGE, syntax="proto3")
    for name, fields in _MESSAGES:
        _add_message(fd, name, fields, {}, raw_events=False)
    for name, fields in _MESSAGES:
        _add_message(fd, name, fields, _TEXT_VIEW, raw_events=False, text_as_bytes=True)
    for name, fields in _MESSAGES:
        if name in _VIEW:
            _add_message(fd, name, fields, {**_TEXT_VIEW, **_VIEW}, raw_events=True, text_as_bytes=True)
    # An event's scalars only: its stats (field 4) stay unknown fields, raw bytes that
    # upb skips in C, so a giant event's scalars are read without building its stats.
    m = fd.message_type.add(name="XEventScalarsView")
    for fname, number in (("metadata_id", 1), ("offset_ps", 2), ("duration_ps", 3)):
        m.field.add(name=fname, number=number, type=_I64, label=_OPT)
    return fd


_pool = descriptor_pool.DescriptorPool()
_pool.Add(_file())


def _cls(name: str) -> type:
    return message_factory.GetMessageClass(_pool.FindMessageTypeByName(f"{PACKAGE}.{name}"))


XSpace = _cls("XSpace")
XPlane = _cls("XPlane")
XLine = _cls("XLine")
XEvent = _cls("XEvent")
XStat = _cls("XStat")
XEventMetadata = _cls("XEventMetadata")
XStatMetadata = _cls("XStatMetadata")
XSpaceView = _cls("XSpaceView")
XPlaneView = _cls("XPlaneView")
XLineView = _cls("XLineView")
XEventView = _cls("XEventView")
XStatView = _cls("XStatView")
XSpaceIndexView = _cls("XSpaceIndexView")
XPlaneIndexView = _cls("XPlaneIndexView")
XLineIndexView = _cls("XLineIndexView")
XEventScalarsView = _cls("XEventScalarsView")
