"""A DCB decision model with bounded retry on conflict.

    python examples/python/course_subscriptions.py WORK_DIR

Six students race (on six threads) for the three seats of a course. Each subscription is a
decision: state is folded from the events matching the decision's query, the rule is checked,
and the new event is appended guarded by that query and the head the read saw. A
`ConflictError` means someone changed what we decided on: decide again, a bounded number of
times. Exactly three students get a seat; the others are refused because the course is full.
"""

import json
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from lapilli import AppendCondition, ConflictError, Event, Query, QueryItem, Store

MAX_ATTEMPTS = 10


@dataclass
class CourseSeats:
    capacity: int = 0
    taken: int = 0
    student_registered: bool = False
    student_subscribed: bool = False


class Refused(Exception):
    pass


def fold(events, student):
    state = CourseSeats()
    for event in events:
        data = json.loads(event.data)
        if event.type == "CourseDefined":
            state.capacity = data["capacity"]
        elif event.type == "StudentRegistered":
            state.student_registered = True
        elif event.type == "StudentSubscribedToCourse":
            if data["studentId"] == student:
                state.student_subscribed = True
            state.taken += 1 if f"course:{data['courseId']}" in event.tags else 0
    return state


def subscribe(store, course, student):
    """Subscribes `student` to `course`; returns the position, or raises Refused."""
    query = Query.of(
        [
            QueryItem(types=["CourseDefined", "StudentSubscribedToCourse"], tags=[f"course:{course}"]),
            QueryItem(types=["StudentRegistered"], tags=[f"student:{student}"]),
        ]
    )
    for attempt in range(1, MAX_ATTEMPTS + 1):
        result = store.read(query)
        state = fold(result, student)
        if not state.student_registered:
            raise Refused(f"{student} is not registered")
        if state.student_subscribed:
            raise Refused(f"{student} is already subscribed")
        if state.taken >= state.capacity:
            raise Refused(f"course {course} is full")
        event = Event(
            "StudentSubscribedToCourse",
            [f"course:{course}", f"student:{student}"],
            json.dumps({"courseId": course, "studentId": student}).encode(),
        )
        try:
            return store.append([event], AppendCondition(query, after=result.head)).first
        except ConflictError as conflict:
            print(f"{student}: attempt {attempt} conflicted with position {conflict.position}; deciding again")
    raise Refused(f"{student}: still conflicting after {MAX_ATTEMPTS} attempts")


def main(work_dir):
    students = [f"s{i}" for i in range(1, 7)]
    with Store.open(Path(work_dir) / "courses") as store:
        store.append([Event("CourseDefined", ["course:c1"], json.dumps({"courseId": "c1", "capacity": 3}).encode())])
        store.append(
            [Event("StudentRegistered", [f"student:{s}"], json.dumps({"studentId": s}).encode()) for s in students]
        )
        outcomes = {}
        barrier = threading.Barrier(len(students))

        def run(student):
            barrier.wait()
            try:
                outcomes[student] = f"subscribed at position {subscribe(store, 'c1', student)}"
            except Refused as refused:
                outcomes[student] = f"refused: {refused}"

        threads = [threading.Thread(target=run, args=(s,)) for s in students]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for student in students:
            print(f"{student}: {outcomes[student]}")
        seated = [s for s in students if outcomes[s].startswith("subscribed")]
        assert len(seated) == 3, outcomes
        assert all("full" in outcomes[s] for s in students if s not in seated), outcomes
        subscribed = store.read(Query.for_types("StudentSubscribedToCourse")).to_list()
        assert len(subscribed) == 3
        print(f"{len(seated)} of {len(students)} students got a seat; the course never went over capacity.")


if __name__ == "__main__":
    main(sys.argv[1])
