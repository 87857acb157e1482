//! The Rust runner of the cross-language conformance scenarios (`tests/README.md`).
//!
//! Every `tests/conformance/*.json` file is run against a fresh temporary directory. All files
//! run; the test then fails listing every failing file with the index of its first failing step
//! and what differed, so one broken scenario never hides another. Finding no scenario at all is
//! a failure too. Step indices count from 0, as in the JSON `steps` list.
//!
//! Beyond what each step states, every read and subscription batch is checked for what API.md
//! promises of all returned events: tags sorted, `recorded_at` non-decreasing with position. A
//! scenario with an unknown op or field fails, so a misspelt expectation cannot pass silently.

mod common;

use common::postgres::database_url;

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::time::Duration;

use lapilli_core::{
    AppendCondition, Error, Event, Options, PendingAppend, Position, Query, QueryItem, ReadOptions,
    SequencedEvent, Store, Subscription,
};
use serde_json::{Map, Value};

/// Which store a scenario runs against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Backend {
    /// A fresh temporary directory.
    Embedded,
    /// A fresh context in the database of `LAPILLI_TEST_POSTGRES_URL`.
    Postgres,
}

#[test]
fn conformance_scenarios() {
    run_scenarios(Backend::Embedded);
}

/// The same scenarios on the PostgreSQL backend (feature `postgres`), each in a context of its
/// own; those marked `"embedded_only"` (files, locks, recovery) are skipped. Without
/// `LAPILLI_TEST_POSTGRES_URL` it says so and passes, unless `LAPILLI_REQUIRE_POSTGRES=1`
/// (`scripts/test.sh` sets both).
#[test]
fn conformance_scenarios_postgres() {
    if database_url().is_none() {
        return;
    }
    run_scenarios(Backend::Postgres);
}

fn run_scenarios(backend: Backend) {
    // LAPILLI_CONFORMANCE_DIR points the runner at another directory (to check the runner
    // itself against deliberately wrong scenarios).
    let dir = std::env::var_os("LAPILLI_CONFORMANCE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/conformance"));
    let files = scenario_files(&dir);
    assert!(!files.is_empty(), "no scenario (*.json) found in {}", dir.display());
    let mut failures = Vec::new();
    for file in &files {
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        let outcome = catch_unwind(AssertUnwindSafe(|| run_file(file, backend)))
            .unwrap_or_else(|panic| Err(format!("the runner panicked: {}", panic_text(&panic))));
        match outcome {
            Ok(Ran::Yes) => eprintln!("ok   {name}"),
            Ok(Ran::EmbeddedOnly) => eprintln!("skip {name} (embedded only)"),
            Err(why) => {
                eprintln!("FAIL {name}: {why}");
                failures.push(format!("{name}: {why}"));
            }
        }
    }
    if !failures.is_empty() {
        panic!(
            "{} of {} conformance scenarios failed:\n  {}",
            failures.len(),
            files.len(),
            failures.join("\n  ")
        );
    }
    eprintln!("{} conformance scenarios passed on {backend:?}", files.len());
}

fn scenario_files(dir: &Path) -> Vec<PathBuf> {
    let entries = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot list the scenarios in {}: {e}", dir.display()));
    let mut files: Vec<PathBuf> = entries
        .map(|entry| entry.expect("cannot list the scenario directory").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .collect();
    files.sort();
    files
}

fn panic_text(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "(no message)".into())
}

/// Why a scenario failed; the caller prefixes the step.
type Outcome<T = ()> = std::result::Result<T, String>;

enum Ran {
    Yes,
    EmbeddedOnly,
}

fn run_file(path: &Path, backend: Backend) -> Outcome<Ran> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read: {e}"))?;
    let scenario: Value = serde_json::from_str(&text).map_err(|e| format!("not valid JSON: {e}"))?;
    let scenario = scenario.as_object().ok_or("the scenario is not a JSON object")?;
    for key in scenario.keys() {
        if key != "description" && key != "steps" && key != "embedded_only" {
            return Err(format!("unknown top-level field {key:?}"));
        }
    }
    let embedded_only = match scenario.get("embedded_only") {
        None => false,
        Some(Value::Bool(only)) => *only,
        Some(other) => return Err(format!("\"embedded_only\" is {other}; it must be true or false")),
    };
    match scenario.get("description") {
        Some(Value::String(d)) if !d.trim().is_empty() => {}
        _ => return Err("missing a non-empty \"description\"".into()),
    }
    let steps = scenario.get("steps").and_then(Value::as_array).ok_or("missing \"steps\" (a list)")?;
    if steps.is_empty() {
        return Err("\"steps\" is empty".into());
    }
    if embedded_only && backend == Backend::Postgres {
        return Ok(Ran::EmbeddedOnly);
    }
    let dir = tempfile::tempdir().map_err(|e| format!("cannot create a temporary directory: {e}"))?;
    let location = match backend {
        Backend::Embedded => dir.path().join("store"),
        Backend::Postgres => PathBuf::from(fresh_context_url(path)),
    };
    let mut run = Run { dir: location, store: None, subscriptions: HashMap::new() };
    for (index, step) in steps.iter().enumerate() {
        let op = step.get("op").and_then(Value::as_str).unwrap_or("?");
        run.step(step).map_err(|why| format!("step {index} ({op}): {why}"))?;
    }
    Ok(Ran::Yes)
}

/// The test database's URL with a context no earlier run used.
fn fresh_context_url(scenario: &Path) -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let url = database_url().expect("checked by the caller");
    let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_micros();
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let stem: String = scenario
        .file_stem()
        .map(|s| s.to_string_lossy().chars().filter(|c| c.is_ascii_lowercase() || *c == '_').take(16).collect())
        .unwrap_or_default();
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}context=t{}_{n}_{stem}", stamp % 1_000_000_000_000)
}

struct Run {
    /// The store's location: a directory, or a Postgres URL.
    dir: PathBuf,
    /// The handle opened by the last `open` / `reopen`; kept after `close` so later steps see
    /// `Closed`.
    store: Option<Store>,
    subscriptions: HashMap<String, Subscription>,
}

impl Run {
    fn store(&self) -> Outcome<&Store> {
        self.store.as_ref().ok_or_else(|| "no store was opened before this step".to_string())
    }

    fn step(&mut self, step: &Value) -> Outcome {
        let step = step.as_object().ok_or("a step is not a JSON object")?;
        let op = step.get("op").and_then(Value::as_str).ok_or("a step has no \"op\"")?;
        let allowed: &[&str] = match op {
            "open" | "open_again" | "reopen" => &["options"],
            "close" => &[],
            "head" => &["expect"],
            "append" => &["events", "condition", "expect"],
            "append_concurrent" => &["appends", "expect"],
            "read" => &["query", "after", "until", "limit", "backwards", "expect"],
            "subscribe" => &["id", "query", "after"],
            "next_batch" => &["id", "max", "timeout_ms", "expect"],
            "close_subscription" => &["id"],
            other => return Err(format!("unknown op {other:?}")),
        };
        for key in step.keys() {
            if key != "op" && key != "expect_error" && !allowed.contains(&key.as_str()) {
                return Err(format!("unknown field {key:?} for op {op:?}"));
            }
        }
        let expect_error = step.get("expect_error");
        if expect_error.is_some() && step.contains_key("expect") {
            return Err("a step carries both \"expect\" and \"expect_error\"".into());
        }
        match op {
            "open" => {
                let options = options(step.get("options"))?;
                let opened = Store::open(&self.dir, options);
                if let Some(store) = outcome(expect_error, opened)? {
                    self.store = Some(store);
                }
            }
            "open_again" => {
                self.store()?;
                let options = options(step.get("options"))?;
                // A second handle that opens (when the scenario says it should) is dropped at
                // once, releasing nothing of the first.
                outcome(expect_error, Store::open(&self.dir, options))?;
            }
            "reopen" => {
                let options = options(step.get("options"))?;
                if let Some(store) = self.store.take() {
                    store.close().map_err(|e| format!("closing before reopening failed: {}", describe(&e)))?;
                }
                if let Some(store) = outcome(expect_error, Store::open(&self.dir, options))? {
                    self.store = Some(store);
                }
            }
            "close" => {
                outcome(expect_error, self.store()?.close())?;
            }
            "head" => {
                let got = outcome(expect_error, self.store()?.head())?;
                if let Some(got) = got {
                    let want = u64_field(step, "expect")?.ok_or("missing \"expect\"")?;
                    if got.get() != want {
                        return Err(format!("head: expected {want}, got {got}"));
                    }
                }
            }
            "append" => {
                let events = events(step.get("events").ok_or("missing \"events\"")?)?;
                let condition = step.get("condition").map(condition).transpose()?;
                let got = outcome(expect_error, self.store()?.append(events, condition))?;
                if let (Some(got), Some(want)) = (got, step.get("expect")) {
                    let want_first = u64_field(obj(want, "expect")?, "first")?.ok_or("expect has no \"first\"")?;
                    let want_last = u64_field(obj(want, "expect")?, "last")?.ok_or("expect has no \"last\"")?;
                    if (got.first.get(), got.last.get()) != (want_first, want_last) {
                        return Err(format!(
                            "expected first {want_first}, last {want_last}; got first {}, last {}",
                            got.first, got.last
                        ));
                    }
                }
            }
            "append_concurrent" => self.append_concurrent(step, expect_error)?,
            "read" => self.read(step, expect_error)?,
            "subscribe" => {
                let id = str_field(step, "id")?;
                if self.subscriptions.contains_key(&id) {
                    return Err(format!("subscription id {id:?} is already in use"));
                }
                let query = query(step.get("query").ok_or("missing \"query\"")?)?;
                let after = Position(u64_field(step, "after")?.unwrap_or(0));
                if let Some(subscription) = outcome(expect_error, self.store()?.subscribe(&query, after))? {
                    self.subscriptions.insert(id, subscription);
                }
            }
            "next_batch" => self.next_batch(step, expect_error)?,
            "close_subscription" => {
                let id = str_field(step, "id")?;
                let subscription =
                    self.subscriptions.get(&id).ok_or_else(|| format!("no subscription {id:?}"))?;
                subscription.close();
            }
            _ => unreachable!("checked above"),
        }
        Ok(())
    }

    fn append_concurrent(&self, step: &Map<String, Value>, expect_error: Option<&Value>) -> Outcome {
        if expect_error.is_some() {
            return Err("append_concurrent counts its errors in \"expect\"; it takes no \"expect_error\"".into());
        }
        let appends = step.get("appends").and_then(Value::as_array).ok_or("missing \"appends\" (a list)")?;
        let mut requests = Vec::new();
        for (i, append) in appends.iter().enumerate() {
            let append = obj(append, "an append")?;
            for key in append.keys() {
                if key != "events" && key != "condition" {
                    return Err(format!("append {i}: unknown field {key:?}"));
                }
            }
            let events = events(append.get("events").ok_or_else(|| format!("append {i}: missing \"events\""))?)?;
            let condition = append.get("condition").map(condition).transpose()?;
            requests.push((events, condition));
        }
        let store = self.store()?;
        // Submit every append before waiting on any, so they can share a group commit.
        let pending: Vec<PendingAppend> =
            requests.into_iter().map(|(events, condition)| store.submit(events, condition)).collect();
        let results: Vec<_> = pending.into_iter().map(PendingAppend::wait).collect();
        let mut ok = 0u64;
        let mut errors: BTreeMap<String, u64> = BTreeMap::new();
        let mut ranges = Vec::new();
        for result in &results {
            match result {
                Ok(r) => {
                    ok += 1;
                    ranges.push((r.first.get(), r.last.get()));
                }
                Err(e) => *errors.entry(e.kind().code().to_string()).or_default() += 1,
            }
        }
        ranges.sort();
        for pair in ranges.windows(2) {
            if pair[1].0 <= pair[0].1 {
                return Err(format!("two successful appends overlap: {:?} and {:?}", pair[0], pair[1]));
            }
        }
        let want = obj(step.get("expect").ok_or("missing \"expect\"")?, "expect")?;
        let want_ok = u64_field(want, "ok")?.ok_or("expect has no \"ok\"")?;
        let mut want_errors: BTreeMap<String, u64> = BTreeMap::new();
        if let Some(map) = want.get("errors") {
            for (kind, count) in obj(map, "expect.errors")? {
                let count = count.as_u64().ok_or("an error count is not an unsigned integer")?;
                if count > 0 {
                    want_errors.insert(kind.clone(), count);
                }
            }
        }
        if ok != want_ok || errors != want_errors {
            let detail: Vec<String> = results
                .iter()
                .map(|r| match r {
                    Ok(r) => format!("ok {}..{}", r.first, r.last),
                    Err(e) => describe(e),
                })
                .collect();
            return Err(format!(
                "expected ok {want_ok}, errors {want_errors:?}; got ok {ok}, errors {errors:?} ({})",
                detail.join("; ")
            ));
        }
        Ok(())
    }

    fn read(&self, step: &Map<String, Value>, expect_error: Option<&Value>) -> Outcome {
        let query = query(step.get("query").ok_or("missing \"query\"")?)?;
        let options = ReadOptions {
            after: Position(u64_field(step, "after")?.unwrap_or(0)),
            until: u64_field(step, "until")?.map(Position),
            limit: u64_field(step, "limit")?,
            backwards: match step.get("backwards") {
                None => false,
                Some(v) => v.as_bool().ok_or("\"backwards\" is not a boolean")?,
            },
        };
        let read = outcome(expect_error, self.store()?.read(&query, options))?;
        let Some(mut read) = read else { return Ok(()) };
        let head = read.head().get();
        // Take the events in batches, the way the bindings cross their FFI.
        let mut got = Vec::new();
        loop {
            let batch = read.next_batch(7).map_err(|e| format!("reading failed: {}", describe(&e)))?;
            if batch.is_empty() {
                break;
            }
            got.extend(batch);
        }
        check_stored_shape(&got)?;
        let want = obj(step.get("expect").ok_or("missing \"expect\"")?, "expect")?;
        for key in want.keys() {
            if !["positions", "head", "events"].contains(&key.as_str()) {
                return Err(format!("unknown field {key:?} in a read's expect"));
            }
        }
        let want_positions = u64_list(want.get("positions").ok_or("expect has no \"positions\"")?)?;
        let got_positions: Vec<u64> = got.iter().map(|e| e.position.get()).collect();
        if got_positions != want_positions {
            return Err(format!("positions: expected {want_positions:?}, got {got_positions:?}"));
        }
        if let Some(want_head) = u64_field(want, "head")? {
            if head != want_head {
                return Err(format!("read head: expected {want_head}, got {head}"));
            }
        }
        if let Some(want_events) = want.get("events") {
            compare_events(want_events, &got)?;
        }
        Ok(())
    }

    fn next_batch(&self, step: &Map<String, Value>, expect_error: Option<&Value>) -> Outcome {
        let id = str_field(step, "id")?;
        let subscription = self.subscriptions.get(&id).ok_or_else(|| format!("no subscription {id:?}"))?;
        let max = u64_field(step, "max")?.ok_or("missing \"max\"")? as usize;
        let timeout = Duration::from_millis(u64_field(step, "timeout_ms")?.ok_or("missing \"timeout_ms\"")?);
        let got = outcome(expect_error, subscription.next_batch(max, Some(timeout)))?;
        let Some(got) = got else { return Ok(()) };
        let want = obj(step.get("expect").ok_or("missing \"expect\"")?, "expect")?;
        for key in want.keys() {
            if !["positions", "caught_up", "position", "ended"].contains(&key.as_str()) {
                return Err(format!("unknown field {key:?} in a next_batch's expect"));
            }
        }
        let want_ended = match want.get("ended") {
            None => false,
            Some(v) => v.as_bool().ok_or("\"ended\" is not a boolean")?,
        };
        let Some(batch) = got else {
            return if want_ended { Ok(()) } else { Err("expected a batch, got the end of the subscription".into()) };
        };
        let got_positions: Vec<u64> = batch.iter().map(|e| e.position.get()).collect();
        if want_ended {
            return Err(format!("expected the end of the subscription, got a batch {got_positions:?}"));
        }
        check_stored_shape(&batch)?;
        if batch.len() > max {
            return Err(format!("asked for at most {max} events, got {}", batch.len()));
        }
        let want_positions = u64_list(want.get("positions").ok_or("expect has no \"positions\"")?)?;
        if got_positions != want_positions {
            return Err(format!("positions: expected {want_positions:?}, got {got_positions:?}"));
        }
        if let Some(v) = want.get("caught_up") {
            let want_caught_up = v.as_bool().ok_or("\"caught_up\" is not a boolean")?;
            if subscription.caught_up() != want_caught_up {
                return Err(format!("caught_up: expected {want_caught_up}, got {}", subscription.caught_up()));
            }
        }
        if let Some(want_position) = u64_field(want, "position")? {
            let got_position = subscription.position().get();
            if got_position != want_position {
                return Err(format!("position: expected {want_position}, got {got_position}"));
            }
        }
        Ok(())
    }
}

/// Checks a step's result against its `expect_error` (if any): `Ok(Some(value))` when the step
/// succeeded as it should, `Ok(None)` when it failed as it should.
fn outcome<T>(expect_error: Option<&Value>, result: lapilli_core::Result<T>) -> Outcome<Option<T>> {
    let Some(want) = expect_error else {
        return result.map(Some).map_err(|e| format!("unexpected error {}", describe(&e)));
    };
    let want = obj(want, "expect_error")?;
    for key in want.keys() {
        if !["kind", "position", "message_contains"].contains(&key.as_str()) {
            return Err(format!("unknown field {key:?} in expect_error"));
        }
    }
    let kind = str_field(want, "kind")?;
    let err = match result {
        Ok(_) => return Err(format!("expected error {kind}, but the step succeeded")),
        Err(err) => err,
    };
    if err.kind().code() != kind {
        return Err(format!("expected error {kind}, got {}", describe(&err)));
    }
    if let Some(position) = u64_field(want, "position")? {
        if err.position().map(Position::get) != Some(position) {
            let got = err.position().map_or("none".to_string(), |p| p.to_string());
            return Err(format!("expected error {kind} at position {position}, got position {got} ({})", describe(&err)));
        }
    }
    if let Some(fragment) = want.get("message_contains") {
        let fragment = fragment.as_str().ok_or("\"message_contains\" is not a string")?;
        if !err.message().contains(fragment) {
            return Err(format!("expected a message containing {fragment:?}, got {}", describe(&err)));
        }
    }
    Ok(None)
}

fn describe(err: &Error) -> String {
    match err.position() {
        Some(p) => format!("{} at position {p}: {}", err.kind().code(), err.message()),
        None => format!("{}: {}", err.kind().code(), err.message()),
    }
}

/// What API.md promises of every returned event: tags sorted, and `recorded_at` in microseconds
/// since the Unix epoch (so between 2020 and a day from now: a unit slip fails this) and
/// non-decreasing with position.
fn check_stored_shape(events: &[SequencedEvent]) -> Outcome {
    const YEAR_2020_MICROS: u64 = 1_577_836_800_000_000;
    let now_micros = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("the clock is after 1970")
        .as_micros() as u64;
    for event in events {
        if event.recorded_at < YEAR_2020_MICROS || event.recorded_at > now_micros + 86_400_000_000 {
            return Err(format!(
                "event {} has recorded_at {}, not microseconds since the Unix epoch for a recent commit",
                event.position, event.recorded_at
            ));
        }
        if !event.tags.windows(2).all(|w| w[0] < w[1]) {
            return Err(format!("event {} has tags out of order: {:?}", event.position, event.tags));
        }
    }
    let mut stamps: Vec<(u64, u64)> = events.iter().map(|e| (e.position.get(), e.recorded_at)).collect();
    stamps.sort();
    for pair in stamps.windows(2) {
        if pair[1].1 < pair[0].1 {
            return Err(format!(
                "recorded_at goes backwards: event {} at {} but event {} at {}",
                pair[0].0, pair[0].1, pair[1].0, pair[1].1
            ));
        }
    }
    Ok(())
}

fn compare_events(want: &Value, got: &[SequencedEvent]) -> Outcome {
    let want = want.as_array().ok_or("expect.events is not a list")?;
    if want.len() != got.len() {
        return Err(format!("expected {} events, got {}", want.len(), got.len()));
    }
    for (i, (want, got)) in want.iter().zip(got).enumerate() {
        let want = obj(want, "an expected event")?;
        for key in want.keys() {
            if !["position", "type", "tags", "data"].contains(&key.as_str()) {
                return Err(format!("unknown field {key:?} in expected event {i}"));
            }
        }
        let position = u64_field(want, "position")?.ok_or("an expected event has no \"position\"")?;
        if got.position.get() != position {
            return Err(format!("event {i}: position expected {position}, got {}", got.position));
        }
        let event_type = text(want.get("type").ok_or("an expected event has no \"type\"")?)?;
        if got.event_type != event_type {
            return Err(format!("event at {position}: type expected {event_type:?}, got {:?}", got.event_type));
        }
        let tags = match want.get("tags") {
            None => Vec::new(),
            Some(tags) => tags.as_array().ok_or("\"tags\" is not a list")?.iter().map(text).collect::<Outcome<_>>()?,
        };
        if got.tags != tags {
            return Err(format!("event at {position}: tags expected {tags:?}, got {:?}", got.tags));
        }
        let data = want.get("data").map(data).transpose()?.unwrap_or_default();
        if got.data != data {
            return Err(format!(
                "event at {position}: data expected {} bytes {}, got {} bytes {}",
                data.len(),
                hex_preview(&data),
                got.data.len(),
                hex_preview(&got.data)
            ));
        }
    }
    Ok(())
}

fn hex_preview(bytes: &[u8]) -> String {
    let mut out = String::new();
    for b in bytes.iter().take(32) {
        let _ = write!(out, "{b:02x}");
    }
    if bytes.len() > 32 {
        out.push('…');
    }
    format!("[{out}]")
}

// ---- values (tests/README.md, "Values") ----

fn obj<'a>(value: &'a Value, what: &str) -> Outcome<&'a Map<String, Value>> {
    value.as_object().ok_or_else(|| format!("{what} is not a JSON object"))
}

fn u64_field(map: &Map<String, Value>, key: &str) -> Outcome<Option<u64>> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v.as_u64().map(Some).ok_or_else(|| format!("\"{key}\" is not an unsigned integer")),
    }
}

fn u64_list(value: &Value) -> Outcome<Vec<u64>> {
    value
        .as_array()
        .ok_or("a position list is not a list")?
        .iter()
        .map(|v| v.as_u64().ok_or_else(|| "a position is not an unsigned integer".to_string()))
        .collect()
}

fn str_field(map: &Map<String, Value>, key: &str) -> Outcome<String> {
    map.get(key).and_then(Value::as_str).map(str::to_owned).ok_or_else(|| format!("missing \"{key}\" (a string)"))
}

/// A string value: a JSON string or `{"repeat": s, "times": n}`.
fn text(value: &Value) -> Outcome<String> {
    match value {
        Value::String(s) => Ok(s.clone()),
        Value::Object(map) => {
            let unit = str_field(map, "repeat")?;
            let times = u64_field(map, "times")?.ok_or("a repeat has no \"times\"")?;
            if map.len() != 2 {
                return Err("a repeat takes only \"repeat\" and \"times\"".into());
            }
            Ok(unit.repeat(times as usize))
        }
        _ => Err(format!("{value} is not a string value")),
    }
}

/// A data value: a JSON string (its UTF-8), `{"hex": ...}` or `{"fill": b, "len": n}`.
fn data(value: &Value) -> Outcome<Vec<u8>> {
    match value {
        Value::String(s) => Ok(s.as_bytes().to_vec()),
        Value::Object(map) if map.contains_key("hex") && map.len() == 1 => {
            let hex = str_field(map, "hex")?;
            if hex.len() % 2 != 0 {
                return Err(format!("hex {hex:?} has an odd length"));
            }
            (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).map_err(|_| format!("bad hex {hex:?}")))
                .collect()
        }
        Value::Object(map) if map.contains_key("fill") && map.len() == 2 => {
            let fill = u64_field(map, "fill")?.filter(|&b| b <= 255).ok_or("\"fill\" is not a byte")?;
            let len = u64_field(map, "len")?.ok_or("a fill has no \"len\"")?;
            Ok(vec![fill as u8; len as usize])
        }
        _ => Err(format!("{value} is not a data value")),
    }
}

fn events(value: &Value) -> Outcome<Vec<Event>> {
    value.as_array().ok_or("\"events\" is not a list")?.iter().map(event).collect()
}

fn event(value: &Value) -> Outcome<Event> {
    let map = obj(value, "an event")?;
    for key in map.keys() {
        if !["type", "tags", "data"].contains(&key.as_str()) {
            return Err(format!("unknown field {key:?} in an event"));
        }
    }
    let event_type = text(map.get("type").ok_or("an event has no \"type\"")?)?;
    let tags = match map.get("tags") {
        None => Vec::new(),
        Some(tags) => tags.as_array().ok_or("\"tags\" is not a list")?.iter().map(text).collect::<Outcome<_>>()?,
    };
    let data = map.get("data").map(data).transpose()?.unwrap_or_default();
    Ok(Event { event_type, tags, data })
}

fn query(value: &Value) -> Outcome<Query> {
    if value.as_str() == Some("all") {
        return Ok(Query::all());
    }
    let map = obj(value, "a query")?;
    if map.len() != 1 {
        return Err("a query is \"all\" or {\"items\": [...]}".into());
    }
    let items = map.get("items").and_then(Value::as_array).ok_or("a query has no \"items\" list")?;
    let mut out = Vec::new();
    for item in items {
        let item = obj(item, "a query item")?;
        let list = |key: &str| -> Outcome<Vec<String>> {
            match item.get(key) {
                None => Ok(Vec::new()),
                Some(v) => v.as_array().ok_or(format!("\"{key}\" is not a list"))?.iter().map(text).collect(),
            }
        };
        for key in item.keys() {
            if key != "types" && key != "tags" {
                return Err(format!("unknown field {key:?} in a query item"));
            }
        }
        out.push(QueryItem { types: list("types")?, tags: list("tags")? });
    }
    Ok(Query::of(out))
}

fn condition(value: &Value) -> Outcome<AppendCondition> {
    let map = obj(value, "a condition")?;
    for key in map.keys() {
        if !["fail_if_events_match", "after", "fail_if_exists"].contains(&key.as_str()) {
            return Err(format!("unknown field {key:?} in a condition"));
        }
    }
    Ok(AppendCondition {
        fail_if_events_match: query(map.get("fail_if_events_match").ok_or("a condition has no \"fail_if_events_match\"")?)?,
        after: u64_field(map, "after")?.map(Position),
        fail_if_exists: map.get("fail_if_exists").map(query).transpose()?,
    })
}

fn options(value: Option<&Value>) -> Outcome<Options> {
    let mut options = Options::default();
    let Some(value) = value else { return Ok(options) };
    let map = obj(value, "options")?;
    for (key, v) in map {
        match key.as_str() {
            "durability" => {
                let name = v.as_str().ok_or("\"durability\" is not a string")?;
                options.durability = name.parse().map_err(|e: Error| e.message().to_string())?;
            }
            "segment_size" => options.segment_size = v.as_u64().ok_or("\"segment_size\" is not an unsigned integer")?,
            "max_event_bytes" => {
                options.max_event_bytes = v.as_u64().ok_or("\"max_event_bytes\" is not an unsigned integer")? as usize
            }
            other => return Err(format!("unknown option {other:?}")),
        }
    }
    Ok(options)
}
