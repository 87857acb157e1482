"""A projection kept current by a subscription, its position persisted to a file.

    python examples/python/projection.py WORK_DIR

The projection counts subscriptions per course. It is fed by `Store.subscribe(query,
after=<saved position>)`, and after each batch it saves its state together with
`Subscription.position` to a file (written aside and renamed, so a crash leaves the old or the
new file, never half of one). A restarted projector resumes where it stopped: it sees every
event once, with no gap and no duplicate.
"""

import json
import os
import sys
from pathlib import Path

from lapilli import Event, Query, Store

QUERY = Query.for_types("StudentSubscribedToCourse")


class CourseCounts:
    def __init__(self, path):
        self.path = path
        saved = json.loads(path.read_text()) if path.exists() else {"position": 0, "counts": {}}
        self.position = saved["position"]
        self.counts = saved["counts"]

    def apply(self, event):
        course = json.loads(event.data)["courseId"]
        self.counts[course] = self.counts.get(course, 0) + 1

    def save(self, position):
        self.position = position
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"position": position, "counts": self.counts}))
        os.replace(tmp, self.path)


def run_projector(store, state_file, stop_when_caught_up=True):
    """Feeds the projection until it has seen everything committed so far."""
    projection = CourseCounts(state_file)
    applied = 0
    with store.subscribe(QUERY, after=projection.position) as subscription:
        while True:
            batch = subscription.next_batch(100, timeout=1.0)
            if batch is None:  # the store closed
                break
            for event in batch:
                projection.apply(event)
                applied += 1
            if batch:
                projection.save(subscription.position)
            if stop_when_caught_up and subscription.caught_up:
                break
    return projection, applied


def subscribe_students(store, course, students):
    store.append(
        [
            Event("StudentSubscribedToCourse", [f"course:{course}", f"student:{s}"],
                  json.dumps({"courseId": course, "studentId": s}).encode())
            for s in students
        ]
    )


def main(work_dir):
    work = Path(work_dir)
    state_file = work / "course_counts.json"
    with Store.open(work / "store") as store:
        subscribe_students(store, "c1", ["s1", "s2"])
        store.append([Event("Unrelated", ["noise"])])
        subscribe_students(store, "c2", ["s3"])

        projection, applied = run_projector(store, state_file)
        print(f"first run applied {applied} events: {projection.counts} (saved at position {projection.position})")
        assert projection.counts == {"c1": 2, "c2": 1} and applied == 3

        subscribe_students(store, "c1", ["s4"])
        subscribe_students(store, "c2", ["s5", "s6"])

        projection, applied = run_projector(store, state_file)  # a restarted projector
        print(f"second run resumed after position 5, applied {applied}: {projection.counts}")
        assert applied == 3 and projection.counts == {"c1": 3, "c2": 3}
        assert projection.position == store.head()

        rebuilt = {}
        for event in store.read(QUERY):
            course = json.loads(event.data)["courseId"]
            rebuilt[course] = rebuilt.get(course, 0) + 1
        assert rebuilt == projection.counts
        print("the resumed projection equals one rebuilt from the whole history")


if __name__ == "__main__":
    main(sys.argv[1])
