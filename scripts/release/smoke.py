"""The release smoke test (Python): the same few steps as smoke.mjs and Smoke.kt.

Run by scripts/release.sh against a wheel installed from dist/ into a clean venv:
open, a conditional append accepted and one refused with ConflictError, a bounded read,
a subscription that receives, close. Usage: python smoke.py STORE_DIR
"""
import sys

from lapilli import AppendCondition, ConflictError, Event, Query, Store

path = sys.argv[1]
with Store.open(path) as store:
    course = Query.for_tags("course:c1")
    seen = store.read(course)
    assert seen.to_list() == [], "a fresh store has no course events"
    condition = AppendCondition(fail_if_events_match=course, after=seen.head)
    store.append([Event(type="CourseDefined", tags=["course:c1"], data=b'{"capacity":2}')], condition)
    try:
        store.append([Event(type="CourseDefined", tags=["course:c1"])], condition)
        raise AssertionError("the second append on a stale head was accepted")
    except ConflictError:
        pass
    store.append([Event(type="Noted", tags=["note"]) for _ in range(3)])
    bounded = store.read(Query.all(), after=1, limit=2).to_list()
    assert [e.position for e in bounded] == [2, 3], bounded
    with store.subscribe(course) as sub:
        first = sub.next(timeout=10)
        assert first is not None and first.type == "CourseDefined", first
print(f"python smoke ok: lapilli from {sys.modules['lapilli'].__file__}")
