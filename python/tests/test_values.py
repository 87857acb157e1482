import datetime

import pytest

from lapilli import (
    AppendCondition,
    AppendResult,
    Event,
    InvalidArgumentError,
    LapilliError,
    Query,
    QueryItem,
    SequencedEvent,
)


def test_event_keyword_constructor_fields_and_defaults():
    e = Event(type="CourseDefined", tags=["course:c1"], data=b'{"capacity":2}')
    assert e.type == "CourseDefined"
    assert e.tags == ["course:c1"]
    assert e.data == b'{"capacity":2}'
    bare = Event("Ping")
    assert bare.tags == [] and bare.data == b""


def test_event_accepts_bytearray_and_memoryview_data():
    assert Event("T", data=bytearray(b"\x00\xff")).data == b"\x00\xff"
    assert Event("T", data=memoryview(b"abc")).data == b"abc"


def test_event_equality_hash_and_repr():
    a = Event(type="T", tags=["x", "y"], data=b"\x00")
    b = Event(type="T", tags=["x", "y"], data=b"\x00")
    assert a == b and hash(a) == hash(b)
    assert a != Event(type="T", tags=["y", "x"], data=b"\x00")  # as given, not yet stored
    assert len({a, b}) == 1
    assert repr(a) == "Event(type='T', tags=['x', 'y'], data=b'\\x00')"


def test_event_repr_shortens_long_data():
    r = repr(Event("T", data=b"a" * 1000))
    assert r.endswith("... (1000 bytes))") and len(r) < 150


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"type": b"T"}, "type"),
        ({"type": 3}, "type"),
        ({"type": "T", "tags": "course:c1"}, "tags"),
        ({"type": "T", "tags": [b"course:c1"]}, "tags[0]"),
        ({"type": "T", "tags": ["ok", 5]}, "tags[1]"),
        ({"type": "T", "tags": 7}, "tags"),
        ({"type": "T", "data": "text"}, "data"),
        ({"type": "T", "data": 12}, "data"),
    ],
)
def test_event_wrong_types_raise_type_error_naming_the_argument(kwargs, name):
    with pytest.raises(TypeError) as info:
        Event(**kwargs)
    assert str(info.value).startswith(name + " ")


def test_sequenced_event_fields_recorded_at_is_aware_utc():
    e = SequencedEvent(position=3, type="T", tags=["b", "a"], data=b"x", recorded_at_us=1_700_000_000_123_456)
    assert e.position == 3
    assert e.tags == ["a", "b"]
    assert e.recorded_at == datetime.datetime(2023, 11, 14, 22, 13, 20, 123456, tzinfo=datetime.timezone.utc)
    assert e.recorded_at.tzinfo is datetime.timezone.utc
    assert e.recorded_at_us == 1_700_000_000_123_456
    assert e.to_event() == Event("T", ["a", "b"], b"x")
    assert "position=3" in repr(e)


def test_query_constructors_and_repr():
    assert Query.all().is_all and Query.all().items == []
    q = Query.of([QueryItem(types=["A", "B"], tags=["t"]), QueryItem(tags=["u"])])
    assert q.items[0] == QueryItem(types=["A", "B"], tags=["t"])
    assert repr(q) == "Query.of([QueryItem(types=['A', 'B'], tags=['t']), QueryItem(types=[], tags=['u'])])"
    assert Query.for_tags("a", "b") == Query.of([QueryItem(tags=["a", "b"])])
    assert Query.for_types("X", "Y") == Query.of([QueryItem(types=["X", "Y"])])
    assert repr(Query.all()) == "Query.all()"
    assert hash(Query.for_tags("a")) == hash(Query.for_tags("a"))


@pytest.mark.parametrize(
    "build, needle",
    [
        (lambda: Query.of([]), "no items"),
        (lambda: Query.of([QueryItem()]), "neither types nor tags"),
        (lambda: Query.for_tags(""), "empty"),
        (lambda: Query.for_types("x" * 256), "256"),
        (lambda: Query.for_tags("x" * 1025), "1025"),
    ],
)
def test_bad_queries_raise_invalid_argument(build, needle):
    with pytest.raises(InvalidArgumentError, match=needle) as info:
        build()
    assert isinstance(info.value, ValueError) and isinstance(info.value, LapilliError)
    assert info.value.code == "INVALID_ARGUMENT"


def test_query_wrong_types():
    with pytest.raises(TypeError, match=r"^items\[0\] must be QueryItem"):
        Query.of(["course:c1"])
    with pytest.raises(TypeError, match="^items must be a list of QueryItem"):
        Query.of("abc")
    with pytest.raises(TypeError, match=r"^tags\[0\] must be str"):
        Query.for_tags(b"x")
    with pytest.raises(TypeError, match="^types must be a list of str"):
        QueryItem(types="A")


def test_append_condition():
    q = Query.for_tags("course:c1")
    c = AppendCondition(fail_if_events_match=q, after=5, fail_if_exists=Query.for_tags("idem:1"))
    assert c.fail_if_events_match == q and c.after == 5 and c.fail_if_exists == Query.for_tags("idem:1")
    assert AppendCondition(q).after is None and AppendCondition(q).fail_if_exists is None
    assert c == AppendCondition(q, 5, Query.for_tags("idem:1"))
    assert "after=5" in repr(c)
    with pytest.raises(TypeError, match="^fail_if_events_match must be Query"):
        AppendCondition(fail_if_events_match="course:c1")
    with pytest.raises(TypeError, match="^after must be int"):
        AppendCondition(q, after="5")
    with pytest.raises(TypeError, match="^fail_if_exists must be Query"):
        AppendCondition(q, fail_if_exists=["x"])
    with pytest.raises(InvalidArgumentError, match="-1"):
        AppendCondition(q, after=-1)


def test_append_result():
    r = AppendResult(first=1, last=3)
    assert (r.first, r.last) == (1, 3) and r == AppendResult(1, 3)
    assert repr(r) == "AppendResult(first=1, last=3)"


def test_values_are_immutable():
    e = Event("T")
    with pytest.raises(AttributeError):
        e.type = "U"  # type: ignore[misc]


def test_values_pickle_round_trip():
    import copy
    import pickle

    values = [
        Event(type="T", tags=["b", "a"], data=b"\x00\xff"),
        SequencedEvent(position=4, type="T", tags=["a"], data=b"x", recorded_at_us=123),
        QueryItem(types=["A"], tags=["k"]),
        Query.all(),
        Query.of([QueryItem(types=["A"]), QueryItem(tags=["k", "l"])]),
        AppendCondition(Query.for_tags("k"), after=3, fail_if_exists=Query.for_types("X")),
        AppendCondition(Query.all()),
        AppendResult(first=1, last=2),
    ]
    for value in values:
        assert pickle.loads(pickle.dumps(value)) == value
        assert copy.deepcopy(value) == value
    assert pickle.loads(pickle.dumps(values[1])).recorded_at_us == 123
