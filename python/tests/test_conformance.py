"""Runs every scenario of tests/conformance/*.json (format: tests/README.md) against the
installed package, each as its own test named after its file."""

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

import lapilli
from lapilli import AppendCondition, Event, LapilliError, Query, QueryItem, Store

REPO = Path(__file__).resolve().parents[2]
SCENARIOS = sorted((REPO / "tests" / "conformance").glob("*.json"))


def text(value):
    if isinstance(value, dict):
        return value["repeat"] * value["times"]
    return value


def data(value):
    if value is None:
        return b""
    if isinstance(value, str):
        return value.encode("utf-8")
    if "hex" in value:
        return bytes.fromhex(value["hex"])
    return bytes([value["fill"]]) * value["len"]


def event(spec):
    return Event(
        type=text(spec["type"]),
        tags=[text(t) for t in spec.get("tags", [])],
        data=data(spec.get("data")),
    )


def query(spec):
    if spec == "all":
        return Query.all()
    return Query.of(
        [
            QueryItem(
                types=[text(t) for t in item.get("types", [])],
                tags=[text(t) for t in item.get("tags", [])],
            )
            for item in spec["items"]
        ]
    )


def condition(spec):
    if spec is None:
        return None
    exists = spec.get("fail_if_exists")
    return AppendCondition(
        fail_if_events_match=query(spec["fail_if_events_match"]),
        after=spec.get("after"),
        fail_if_exists=None if exists is None else query(exists),
    )


def open_store(directory, options):
    options = options or {}
    return Store.open(
        directory,
        durability=options.get("durability", "fsync"),
        segment_size=options.get("segment_size"),
        max_event_bytes=options.get("max_event_bytes"),
    )


class Failure(AssertionError):
    pass


class Runner:
    def __init__(self, name, directory):
        self.name = name
        self.directory = directory
        self.store = None
        self.subscriptions = {}

    def fail(self, index, message):
        raise Failure(f"{self.name} step {index}: {message}")

    def run(self, steps):
        try:
            for index, step in enumerate(steps):
                self.step(index, step)
        finally:
            for sub in self.subscriptions.values():
                sub.close()
            if self.store is not None:
                self.store.close()

    def step(self, index, step):
        expected_error = step.get("expect_error")
        try:
            outcome = self.perform(index, step)
        except LapilliError as error:
            if expected_error is None:
                self.fail(index, f"{step['op']} raised {type(error).__name__}: {error}")
            self.check_error(index, error, expected_error)
            return
        if expected_error is not None:
            self.fail(index, f"{step['op']} succeeded ({outcome!r}); expected {expected_error}")

    def check_error(self, index, error, expected):
        if error.code != expected["kind"]:
            self.fail(index, f"error {error.code} ({error}); expected {expected['kind']}")
        if "position" in expected and error.position != expected["position"]:
            self.fail(index, f"error position {error.position}; expected {expected['position']}")
        if "message_contains" in expected and expected["message_contains"] not in str(error):
            self.fail(index, f"message {str(error)!r} lacks {expected['message_contains']!r}")

    def perform(self, index, step):
        op = step["op"]
        if op == "open":
            self.store = open_store(self.directory, step.get("options"))
        elif op == "open_again":
            second = open_store(self.directory, step.get("options"))
            second.close()
            return second
        elif op == "close":
            self.store.close()
        elif op == "reopen":
            if self.store is not None:
                self.store.close()
                self.store = None
            self.store = open_store(self.directory, step.get("options"))
        elif op == "head":
            head = self.store.head()
            if "expect" in step and head != step["expect"]:
                self.fail(index, f"head {head}; expected {step['expect']}")
            return head
        elif op == "append":
            result = self.store.append(
                [event(e) for e in step["events"]], condition(step.get("condition"))
            )
            expect = step.get("expect")
            if expect is not None and (result.first, result.last) != (expect["first"], expect["last"]):
                self.fail(index, f"append gave {result}; expected {expect}")
            return result
        elif op == "append_concurrent":
            return self.append_concurrent(index, step)
        elif op == "read":
            return self.read(index, step)
        elif op == "subscribe":
            sub = self.store.subscribe(query(step["query"]), after=step.get("after", 0))
            old = self.subscriptions.pop(step["id"], None)
            if old is not None:
                old.close()
            self.subscriptions[step["id"]] = sub
            return sub
        elif op == "next_batch":
            return self.next_batch(index, step)
        elif op == "close_subscription":
            self.subscriptions[step["id"]].close()
        else:
            self.fail(index, f"unknown op {op!r}")
        return None

    def append_concurrent(self, index, step):
        outcomes = []
        pendings = []
        for spec in step["appends"]:
            try:
                pendings.append(
                    self.store.submit([event(e) for e in spec["events"]], condition(spec.get("condition")))
                )
            except LapilliError as error:
                outcomes.append(error.code)
        for pending in pendings:
            try:
                pending.result(timeout=60)
                outcomes.append("ok")
            except LapilliError as error:
                outcomes.append(error.code)
        expect = step.get("expect")
        if expect is not None:
            ok = outcomes.count("ok")
            errors = {}
            for o in outcomes:
                if o != "ok":
                    errors[o] = errors.get(o, 0) + 1
            if ok != expect.get("ok", 0) or errors != expect.get("errors", {}):
                self.fail(index, f"outcomes ok={ok} errors={errors}; expected {expect}")
        return outcomes

    def read(self, index, step):
        result = self.store.read(
            query(step["query"]),
            after=step.get("after", 0),
            until=step.get("until"),
            limit=step.get("limit"),
            backwards=step.get("backwards", False),
        )
        events = list(result)
        expect = step.get("expect")
        if expect is None:
            return events
        positions = [e.position for e in events]
        if positions != expect["positions"]:
            self.fail(index, f"read positions {positions}; expected {expect['positions']}")
        if "head" in expect and result.head != expect["head"]:
            self.fail(index, f"read head {result.head}; expected {expect['head']}")
        if "events" in expect:
            for got, want in zip(events, expect["events"]):
                want_tags = [text(t) for t in want.get("tags", [])]
                fields = (got.position, got.type, got.tags, got.data)
                wanted = (want["position"], text(want["type"]), want_tags, data(want.get("data")))
                if fields != wanted:
                    self.fail(index, f"event {fields!r}; expected {wanted!r}")
            if len(events) != len(expect["events"]):
                self.fail(index, f"{len(events)} events; expected {len(expect['events'])}")
        by_position = sorted(events, key=lambda e: e.position)
        for a, b in zip(by_position, by_position[1:]):
            if a.recorded_at_us > b.recorded_at_us:
                self.fail(index, f"recorded_at decreases from position {a.position} to {b.position}")
        return events

    def next_batch(self, index, step):
        sub = self.subscriptions[step["id"]]
        batch = sub.next_batch(step["max"], step["timeout_ms"] / 1000)
        expect = step.get("expect")
        if expect is None:
            return batch
        if expect.get("ended"):
            if batch is not None:
                self.fail(index, f"next_batch gave {[e.position for e in batch]}; expected the end")
            return batch
        if batch is None:
            self.fail(index, "next_batch ended; expected events")
        positions = [e.position for e in batch]
        if positions != expect["positions"]:
            self.fail(index, f"next_batch positions {positions}; expected {expect['positions']}")
        if "caught_up" in expect and sub.caught_up != expect["caught_up"]:
            self.fail(index, f"caught_up {sub.caught_up}; expected {expect['caught_up']}")
        if "position" in expect and sub.position != expect["position"]:
            self.fail(index, f"position {sub.position}; expected {expect['position']}")
        return batch


def test_the_matrix_is_not_empty():
    assert SCENARIOS, f"no scenarios in {REPO / 'tests' / 'conformance'}"


# The scenarios run on the embedded store, and on the PostgreSQL backend when a server is
# given (scripts/postgres.sh start prints the variable; scripts/test.sh sets it).
POSTGRES_URL = os.environ.get("LAPILLI_TEST_POSTGRES_URL") or None
BACKENDS = ["embedded"] + (["postgres"] if POSTGRES_URL else [])


def test_postgres_is_there_when_required():
    if os.environ.get("LAPILLI_REQUIRE_POSTGRES"):
        assert POSTGRES_URL, "LAPILLI_REQUIRE_POSTGRES is set but LAPILLI_TEST_POSTGRES_URL is not"


def fresh_context_url(path):
    """The test database's URL with a context no earlier run used."""
    stem = "".join(c for c in path.stem if c.islower() or c == "_")[:16]
    return context_url(POSTGRES_URL, fresh_context(stem))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("path", SCENARIOS, ids=[p.name for p in SCENARIOS])
def test_conformance(path, backend, tmp_path):
    scenario = json.loads(path.read_text())
    if backend == "postgres":
        if scenario.get("embedded_only"):
            pytest.skip("embedded only (files, locks or recovery)")
        location = fresh_context_url(path)
    else:
        location = tmp_path / "store"
    Runner(path.name, location).run(scenario["steps"])


# The errors of locations (API.md, "Where a store lives" and "Errors").


def postgres_url():
    """The test database's URL; the test skips without one unless LAPILLI_REQUIRE_POSTGRES is set."""
    if not POSTGRES_URL:
        if os.environ.get("LAPILLI_REQUIRE_POSTGRES"):
            pytest.fail("LAPILLI_REQUIRE_POSTGRES is set but LAPILLI_TEST_POSTGRES_URL is not")
        pytest.skip("no PostgreSQL server (LAPILLI_TEST_POSTGRES_URL)")
    return POSTGRES_URL


def fresh_context(stem):
    """A context name no earlier run used (a-z, 0-9 and _, at most 40 characters)."""
    context = f"py{os.getpid()}_{time.time_ns() // 1000 % 10**12}_{stem}"
    assert len(context) <= 40, context
    return context


def context_url(base, context):
    separator = "&" if "?" in base else "?"
    return f"{base}{separator}context={context}"


def test_an_unknown_url_scheme_is_invalid_argument_and_no_directory(tmp_path, monkeypatch):
    # Needs no server: the scheme is refused before anything is opened.
    monkeypatch.chdir(tmp_path)
    for open_ in (Store.open, Store.open_read_only):
        with pytest.raises(lapilli.InvalidArgumentError) as raised:
            open_("mysql://u@h/db")
        assert raised.value.code == "INVALID_ARGUMENT"
        assert '"mysql"' in str(raised.value), str(raised.value)
    assert not (tmp_path / "mysql:").exists()
    assert list(tmp_path.iterdir()) == []


def test_a_url_scheme_in_capitals_opens_the_same_context():
    # Schemes are case-insensitive: PostgreSQL://... is the same store as postgresql://...
    url = context_url(postgres_url(), fresh_context("scheme"))
    store = Store.open(url)
    store.append([Event(type="T", tags=["k:1"], data=b"7")])
    store.close()
    scheme, rest = url.split("://", 1)
    again = Store.open(scheme.upper() + "://" + rest)
    assert again.head() == 1
    again.close()


def test_a_read_only_open_of_a_missing_context_is_io_like_a_missing_directory(tmp_path):
    context = fresh_context("ro_missing")
    with pytest.raises(lapilli.LapilliIOError) as raised:
        Store.open_read_only(context_url(postgres_url(), context))
    assert raised.value.code == "IO"
    assert "does not exist" in str(raised.value), str(raised.value)
    # The embedded backend answers a missing store with the same kind.
    with pytest.raises(lapilli.LapilliIOError) as missing:
        Store.open_read_only(tmp_path / "missing")
    assert type(missing.value) is type(raised.value)


def test_a_context_of_a_newer_schema_is_corruption():
    base = postgres_url()
    context = fresh_context("newer")
    url = context_url(base, context)
    Store.open(url).close()
    # As if a newer Lapilli had made it (psql takes the URL without Lapilli's `context`).
    updated = subprocess.run(
        # -X: no ~/.psqlrc; -q -At: the returned name alone on stdout (no command tag).
        ["psql", "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", base, "-c",
         f"UPDATE lapilli_contexts SET schema_version = 99 WHERE name = '{context}' RETURNING name"],
        check=True, capture_output=True, text=True,
    )
    assert updated.stdout.strip() == context, updated.stdout + updated.stderr
    for open_ in (Store.open, Store.open_read_only):
        with pytest.raises(lapilli.CorruptionError) as raised:
            open_(url)
        message = str(raised.value)
        assert raised.value.code == "CORRUPTION"
        assert "schema version 99" in message, message
        assert "newer Lapilli" in message, message
