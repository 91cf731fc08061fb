"""Structurally valid requests with hostile field values, built from the protobuf descriptors alone.

Every RPC of every service in ``proto/`` is found by walking the generated modules' service descriptors, and its
request message is filled field by field by type: huge and negative integers, empty, huge and odd strings, random
bytes, enum numbers no enum declares, repeated and map fields a few entries deep, nested messages. A new RPC or
field is covered without touching this file. Most values are plausible (small numbers, names the broker knows,
picked by field name) and a few hostile, so that requests also get past the first check to the code behind it.
"""

from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor, MethodDescriptor
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass
from hypothesis import strategies as st

from proto import broker_pb2, consumer_pb2, ha_pb2, kv_pb2, namesrv_pb2, pop_pb2, tiered_pb2, transaction_pb2

SERVICE_MODULES = (broker_pb2, kv_pb2, tiered_pb2, consumer_pb2, ha_pb2, namesrv_pb2, pop_pb2, transaction_pb2)
MAX_DEPTH = 3  # nested messages deeper than this stay unset
MAX_REPEATED = 4

INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)
INT_EDGES = [0, 1, -1, 2, 7, 31, 1024, 4097, 2**15, 2**16, 2**31 - 1, -(2**31)]
INT64_EDGES = [*INT_EDGES, 2**32, 2**53 + 1, 2**62, 2**63 - 1, -(2**63)]
ODD_STRINGS = ["", " ", "a", "\x00", "%n%s%x", "../../../../etc/passwd", "\u202e\u0627\u0644", "\U0001f600" * 3,
               "\ufeffBOM", "line\nbreak", "a" * 128, "a" * 256, "z" * 100_000, "DefaultCluster", "127.0.0.1:1",
               "host:notaport", ":", "*", "A || B", "||", "A ||"]
ODD_BYTES = [b"", b"\x00", b"\xff" * 9, b"\x01value", bytes(range(256)), b"x" * 200_000]


def all_methods() -> list[MethodDescriptor]:
    return [m for module in SERVICE_MODULES for service in module.DESCRIPTOR.services_by_name.values()
            for m in service.methods]


def method_id(method: MethodDescriptor) -> str:
    return f"{method.containing_service.name}.{method.name}"


Known = dict[str, list[str]]  # a field-name fragment ("topic", "group", ...) -> values that exist


def known_for(field: FieldDescriptor, known: Known) -> list[str]:
    """The known values for a field by its name (``consumer_group`` -> the groups); every one for other names."""
    for fragment, values in known.items():
        if fragment in field.name:
            return values
    return sorted({v for values in known.values() for v in values})


def _hostile_scalar(field: FieldDescriptor, known: Known) -> st.SearchStrategy[Any]:
    t = field.type
    if t in (FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_SINT32, FieldDescriptor.TYPE_SFIXED32):
        return _integers(*INT32, INT_EDGES)
    if t in (FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_SINT64, FieldDescriptor.TYPE_SFIXED64):
        return _integers(*INT64, INT64_EDGES)
    if t in (FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_FIXED32):
        return _integers(0, 2**32 - 1, INT64_EDGES)
    if t in (FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_FIXED64):
        return _integers(0, 2**64 - 1, [*INT64_EDGES, 2**64 - 1])
    if t == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if t in (FieldDescriptor.TYPE_FLOAT, FieldDescriptor.TYPE_DOUBLE):
        return st.floats(allow_nan=True, allow_infinity=True, width=32 if t == FieldDescriptor.TYPE_FLOAT else 64)
    if t == FieldDescriptor.TYPE_STRING:
        return st.one_of(st.sampled_from(ODD_STRINGS), st.text(max_size=40))
    if t == FieldDescriptor.TYPE_BYTES:
        return st.one_of(st.sampled_from(ODD_BYTES), st.binary(max_size=64))
    if t == FieldDescriptor.TYPE_ENUM:  # proto3 enums are open: any int32 travels
        return _integers(*INT32, INT_EDGES)
    raise AssertionError(f"no strategy for field type {t} of {field.full_name}")


def _plausible_scalar(field: FieldDescriptor, known: Known) -> st.SearchStrategy[Any]:
    """What a well-behaved client might send: small offsets and counts, names that exist, declared enums."""
    t = field.type
    if t == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if t in (FieldDescriptor.TYPE_FLOAT, FieldDescriptor.TYPE_DOUBLE):
        return st.floats(0, 100)
    if t == FieldDescriptor.TYPE_STRING:
        return st.sampled_from(known_for(field, known))
    if t == FieldDescriptor.TYPE_BYTES:
        names = [k.encode() for k in known_for(field, known)]
        return st.one_of(st.sampled_from(names), st.binary(min_size=1, max_size=16))
    if t == FieldDescriptor.TYPE_ENUM:
        return st.sampled_from([v.number for v in field.enum_type.values])
    return st.one_of(st.integers(1, 3), st.integers(0, 64))  # every integer type (0 also comes as "unset")


def _integers(lo: int, hi: int, edges: list[int]) -> st.SearchStrategy[int]:
    return st.one_of(st.sampled_from([e for e in edges if lo <= e <= hi]), st.integers(lo, hi))


def _is_repeated(field: FieldDescriptor) -> bool:
    # protobuf 6 deprecates ``label`` in favour of ``is_repeated``; either answers the same
    return field.is_repeated if hasattr(field, "is_repeated") else field.label == FieldDescriptor.LABEL_REPEATED


def _is_map(field: FieldDescriptor) -> bool:
    return (field.type == FieldDescriptor.TYPE_MESSAGE and field.message_type.GetOptions().map_entry
            and _is_repeated(field))


def _single(field: FieldDescriptor, known: Known, depth: int, hostile: bool) -> st.SearchStrategy[Any] | None:
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        return messages(field.message_type, known, depth + 1) if depth < MAX_DEPTH else None
    return (_hostile_scalar if hostile else _plausible_scalar)(field, known)


def _field(field: FieldDescriptor, known: Known, depth: int, hostile: bool) -> st.SearchStrategy[Any] | None:
    if _is_map(field):
        key_field, value_field = field.message_type.fields_by_name["key"], field.message_type.fields_by_name["value"]
        value = _single(value_field, known, depth, hostile)
        if value is None:
            return None
        return st.dictionaries(_single(key_field, known, depth, hostile), value, max_size=MAX_REPEATED)
    one = _single(field, known, depth, hostile)
    if one is None:
        return None
    if not _is_repeated(field):
        return one
    return st.lists(one, min_size=0 if hostile else 1, max_size=MAX_REPEATED)


# Per field: mostly plausible, sometimes unset (zero values), sometimes hostile; so that a request usually
# carries one or two hostile values among plausible ones and gets past the first check to the code behind it.
_MODES = ["plausible"] * 6 + ["unset", "hostile"]


@st.composite
def _build(draw: st.DrawFn, descriptor: Descriptor,
           fields: dict[str, tuple[st.SearchStrategy[Any] | None, st.SearchStrategy[Any] | None]]) -> Message:
    message = GetMessageClass(descriptor)()
    for name, (plausible, hostile) in fields.items():
        mode = draw(st.sampled_from(_MODES))
        strategy = plausible if mode == "plausible" else hostile if mode == "hostile" else None
        if strategy is None:
            continue
        _set(message, name, draw(strategy))
    return message


def _set(message: Message, name: str, value: Any) -> None:
    target = getattr(message, name)
    if isinstance(value, Message):
        target.CopyFrom(value)
    elif isinstance(value, dict):
        for k, v in value.items():
            if isinstance(v, Message):
                target[k].CopyFrom(v)
            else:
                target[k] = v
    elif isinstance(value, list):
        for v in value:
            if isinstance(v, Message):
                target.add().CopyFrom(v)
            else:
                target.append(v)
    else:
        setattr(message, name, value)


def messages(descriptor: Descriptor, known: Known, depth: int = 0) -> st.SearchStrategy[Message]:
    fields = {f.name: (_field(f, known, depth, False), _field(f, known, depth, True)) for f in descriptor.fields}
    return _build(descriptor, fields)


def requests_for(method: MethodDescriptor, known: Known) -> st.SearchStrategy[Any]:
    """One request, or for a client-streaming RPC a short list of them."""
    one = messages(method.input_type, known)
    return st.lists(one, max_size=3) if method.client_streaming else one


def wire_round_trip(message: Message) -> Message:
    """What the server would decode: the request through its serialized form."""
    copy = type(message)()
    copy.ParseFromString(message.SerializeToString())
    return copy
