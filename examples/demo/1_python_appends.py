"""Demo, part 1 (Python): a short DCB story told while appending to the store in STORE_DIR.

    python examples/demo/1_python_appends.py STORE_DIR

A course with two seats, three students. Each subscription is a decision: read the events the
rule depends on (the course's and the student's), check the rule, append guarded by the same
query and the head the read saw. When two decisions race for the last seat, the store refuses
the second append (ConflictError); retried, that decision sees the course full and refuses for
a business reason.

Leaves 6 events: CourseDefined c1, StudentRegistered s1..s3, StudentSubscribedToCourse s1, s2.
"""

import json
import sys

from lapilli import AppendCondition, ConflictError, Event, Query, QueryItem, Store

COURSE = "c1"


def decision_query(student):
    return Query.of(
        [
            QueryItem(types=["CourseDefined", "StudentSubscribedToCourse"], tags=[f"course:{COURSE}"]),
            QueryItem(types=["StudentRegistered", "StudentSubscribedToCourse"], tags=[f"student:{student}"]),
        ]
    )


def decide(store, student):
    """Reads what the rule depends on; returns (refusal or None, the event to append, condition)."""
    query = decision_query(student)
    result = store.read(query)
    capacity, taken, registered, already = None, 0, False, False
    for event in result:
        data = json.loads(event.data)
        if event.type == "CourseDefined":
            capacity = data["capacity"]
        elif event.type == "StudentRegistered":
            registered = True
        elif event.type == "StudentSubscribedToCourse":
            if f"course:{COURSE}" in event.tags:
                taken += 1
            if data["studentId"] == student:
                already = True
    refusal = None
    if capacity is None:
        refusal = f"course {COURSE} does not exist"
    elif not registered:
        refusal = f"student {student} is not registered"
    elif already:
        refusal = f"{student} is already subscribed"
    elif taken >= capacity:
        refusal = f"course {COURSE} is full ({taken} of {capacity} seats taken)"
    event = Event(
        type="StudentSubscribedToCourse",
        tags=[f"course:{COURSE}", f"student:{student}"],
        data=json.dumps({"courseId": COURSE, "studentId": student}).encode(),
    )
    return refusal, event, AppendCondition(fail_if_events_match=query, after=result.head), result.head


def main(store_dir):
    with Store.open(store_dir, durability="fsync") as store:
        print(f"Opened the store in {store_dir}; its head is {store.head()}.")
        course = store.append(
            [Event("CourseDefined", [f"course:{COURSE}"], json.dumps({"courseId": COURSE, "capacity": 2}).encode())]
        )
        print(f"Defined course {COURSE} with 2 seats (position {course.first}).")
        for student, name in (("s1", "Ada"), ("s2", "Grace"), ("s3", "Edsger")):
            r = store.append(
                [Event("StudentRegistered", [f"student:{student}"], json.dumps({"studentId": student, "name": name}).encode())]
            )
            print(f"Registered student {student} ({name}) at position {r.first}.")

        refusal, event, condition, head = decide(store, "s1")
        assert refusal is None, refusal
        r = store.append([event], condition)
        print(f"s1 read the course and itself at head {head}, found a free seat, subscribed (position {r.first}).")

        print("Now s2 and s3 both want the last seat, and decide at the same moment:")
        refusal2, event2, condition2, head2 = decide(store, "s2")
        refusal3, event3, condition3, head3 = decide(store, "s3")
        assert refusal2 is None and refusal3 is None and head2 == head3
        print(f"  both read at head {head2}; both saw one seat left.")
        r = store.append([event2], condition2)
        print(f"  s2 appended first: subscribed at position {r.first}.")
        try:
            store.append([event3], condition3)
            raise SystemExit("the store accepted a decision built on a stale read")
        except ConflictError as conflict:
            print(f"  s3's append was refused: ConflictError, the event at position {conflict.position} "
                  f"changed what s3 decided on.")
        refusal3, _, _, head3 = decide(store, "s3")
        print(f"  s3 decided again at head {head3}: refused, {refusal3}.")
        assert refusal3 is not None and "full" in refusal3
        print(f"The store now holds {store.head()} events; closing it.")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: 1_python_appends.py STORE_DIR")
    main(sys.argv[1])
