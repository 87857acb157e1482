//! The `lapilli` binary on real stores: every command, its output compared with what the store
//! holds, exit statuses, bad arguments, a flipped byte found by `verify` at its position, a bad
//! import line reported by number, and commands on a store a live writer holds (this process).
//! Run by `tests/cli/run.sh`, which then reads the columnar exports back with pyarrow and DuckDB.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use lapilli_core::{Durability, Event, Options, Position, Query, ReadOptions, SequencedEvent, Store};
use serde_json::Value;

fn lapilli(args: &[&dyn AsRef<std::ffi::OsStr>]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lapilli")).args(args.iter().map(|a| a.as_ref())).output().unwrap()
}

fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).unwrap()
}

fn stderr(output: &Output) -> String {
    String::from_utf8(output.stderr.clone()).unwrap()
}

/// Asserts the status, and for a failure that stderr is one line naming `names`.
fn assert_status(output: &Output, status: i32, names: &str) {
    assert_eq!(output.status.code(), Some(status), "stdout: {}\nstderr: {}", stdout(output), stderr(output));
    if status != 0 {
        let err = stderr(output);
        assert_eq!(err.trim_end().lines().count(), 1, "one line on stderr: {err}");
        assert!(err.starts_with("lapilli: "), "{err}");
        assert!(err.contains(names), "stderr names {names:?}: {err}");
    }
}

fn small() -> Options {
    Options { durability: Durability::Buffered, segment_size: 16 << 10, part_bytes: 4 << 10, ..Options::default() }
}

/// 400 events over several segments: types by position, an order tag and a customer tag, data
/// that is text except every 50th event, whose data is not UTF-8.
fn event(i: u64) -> Event {
    let data = if i % 50 == 0 { vec![0xff, 0x00, i as u8] } else { format!("{{\"n\":{i}}}").into_bytes() };
    Event::new(["Placed", "Paid", "Shipped"][(i % 3) as usize], [format!("order:{}", i % 20), format!("customer:{}", i % 3)], data)
}

fn filled(dir: &Path) -> Store {
    let store = Store::open(dir, small()).unwrap();
    for chunk in 0..40u64 {
        store.append((chunk * 10..chunk * 10 + 10).map(event).collect(), None).unwrap();
    }
    store.wait_for_sealing();
    store
}

fn all_events(dir: &Path, query: &Query, options: ReadOptions) -> Vec<SequencedEvent> {
    let store = Store::open_read_only(dir).unwrap();
    store.read(query, options).unwrap().collect_all().unwrap()
}

fn jsonl(text: &str) -> Vec<Value> {
    text.lines().map(|line| serde_json::from_str(line).unwrap()).collect()
}

/// An event as the JSON the binary writes with `--data auto`, without recorded_at.
fn expected_json(e: &SequencedEvent) -> Value {
    let mut object = serde_json::Map::new();
    object.insert("position".into(), e.position.get().into());
    object.insert("type".into(), e.event_type.clone().into());
    object.insert("tags".into(), e.tags.clone().into());
    match std::str::from_utf8(&e.data) {
        Ok(text) => object.insert("data".into(), text.into()),
        Err(_) => {
            use base64::Engine;
            object.insert("data_base64".into(), base64::engine::general_purpose::STANDARD.encode(&e.data).into())
        }
    };
    Value::Object(object)
}

fn without_recorded_at(mut v: Value) -> Value {
    let recorded_at = v.as_object_mut().unwrap().remove("recorded_at").expect("recorded_at is there");
    let text = recorded_at.as_str().unwrap();
    assert!(text.len() == 27 && text.ends_with('Z') && text.as_bytes()[10] == b'T', "RFC 3339: {text}");
    v
}

#[test]
fn read_answers_the_query_as_the_store_does() {
    let dir = tempfile::tempdir().unwrap();
    filled(dir.path()).close().unwrap();
    let d = dir.path();
    let cases: Vec<(Vec<&str>, Query, ReadOptions)> = vec![
        (vec![], Query::all(), ReadOptions::default()),
        (
            vec!["--tag", "order:7", "--tag", "customer:1"],
            Query::of([lapilli_core::QueryItem::new(Vec::<String>::new(), ["order:7", "customer:1"])]),
            ReadOptions::default(),
        ),
        (
            vec!["--type", "Paid", "--type", "Shipped", "--after", "100", "--until", "300", "--limit", "17"],
            Query::for_types(["Paid", "Shipped"]),
            ReadOptions { after: Position(100), until: Some(Position(300)), limit: Some(17), backwards: false },
        ),
        (
            vec!["--tag", "customer:2", "--backwards", "--limit", "5"],
            Query::for_tags(["customer:2"]),
            ReadOptions { limit: Some(5), backwards: true, ..ReadOptions::default() },
        ),
    ];
    for (args, query, options) in cases {
        let mut full: Vec<&dyn AsRef<std::ffi::OsStr>> = vec![&"read", &d, &"--format", &"jsonl"];
        full.extend(args.iter().map(|a| a as &dyn AsRef<std::ffi::OsStr>));
        let output = lapilli(&full);
        assert_status(&output, 0, "");
        let got: Vec<Value> = jsonl(&stdout(&output)).into_iter().map(without_recorded_at).collect();
        let expected: Vec<Value> = all_events(d, &query, options).iter().map(expected_json).collect();
        assert!(!expected.is_empty(), "{args:?}");
        assert_eq!(got, expected, "{args:?}");
    }
    // JSON: one array of the same objects.
    let output = lapilli(&[&"read", &d, &"--format", &"json", &"--limit", &"3"]);
    let array: Vec<Value> = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(array.len(), 3);
    assert_eq!(array[0]["position"], 1);
    // Table: a header and one line per event; binary data as marked base64.
    let output = lapilli(&[&"read", &d, &"--after", &"50", &"--limit", &"2"]);
    let table = stdout(&output);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 3, "{table}");
    assert!(lines[0].split_whitespace().eq(["position", "recorded_at", "type", "tags", "data"]), "{table}");
    assert!(lines[1].trim_start().starts_with("51  ") && lines[1].ends_with("base64:/wAy"), "{table}");
    assert!(lines[2].contains("Placed") && lines[2].contains("customer:0,order:11") && lines[2].ends_with("{\"n\":51}"), "{table}");
    // Data encodings.
    let hex = lapilli(&[&"read", &d, &"--after", &"50", &"--limit", &"1", &"--format", &"jsonl", &"--data", &"hex"]);
    assert_eq!(jsonl(&stdout(&hex))[0]["data_hex"], "ff0032");
    let b64 = lapilli(&[&"read", &d, &"--after", &"51", &"--limit", &"1", &"--format", &"jsonl", &"--data", &"base64"]);
    assert_eq!(jsonl(&stdout(&b64))[0]["data_base64"], "eyJuIjo1MX0=");
    let raw = lapilli(&[&"read", &d, &"--after", &"50", &"--limit", &"1", &"--data", &"raw"]);
    assert!(raw.stdout.ends_with(&[b' ', b' ', 0xff, 0x00, 50, b'\n']));
}

#[test]
fn vocabulary_info_stats_and_verify_on_a_closed_store() {
    let dir = tempfile::tempdir().unwrap();
    filled(dir.path()).close().unwrap();
    let d = dir.path();
    let output = lapilli(&[&"types", &d]);
    assert_status(&output, 0, "");
    // 400 events, types by i % 3 of i = position - 1.
    assert_eq!(stdout(&output), "       133  Paid\n       134  Placed\n       133  Shipped\n");
    let output = lapilli(&[&"tags", &d, &"--prefix", &"customer:"]);
    assert_eq!(stdout(&output), "       134  customer:0\n       133  customer:1\n       133  customer:2\n");
    let output = lapilli(&[&"tags", &d, &"--json"]);
    let tags: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(tags.as_object().unwrap().len(), 23);
    assert_eq!(tags["order:7"], 20);

    let output = lapilli(&[&"info", &d, &"--json"]);
    assert_status(&output, 0, "");
    let info: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!((info["head"].as_u64(), info["events"].as_u64()), (Some(400), Some(400)));
    assert_eq!(info["writer_pid"], Value::Null);
    assert_eq!((info["segment_format_version"].as_u64(), info["index_format_version"].as_u64()), (Some(1), Some(2)));
    let segments = info["segments"].as_array().unwrap();
    assert!(segments.len() >= 2, "{info}");
    assert_eq!(segments.iter().map(|s| s["events"].as_u64().unwrap()).sum::<u64>(), 400);
    assert!(segments[..segments.len() - 1].iter().all(|s| s["sealed"] == true && s["index"] == "index file"));
    assert_eq!(segments.last().unwrap()["sealed"], false);
    let first_at = info["first_recorded_at"].as_str().unwrap();
    assert!(first_at <= info["last_recorded_at"].as_str().unwrap());
    let text = stdout(&lapilli(&[&"info", &d]));
    assert!(text.contains("head           400\n") && text.contains("writer         none\n"), "{text}");

    let output = lapilli(&[&"stats", &d, &"--json"]);
    assert_status(&output, 0, "");
    let stats: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(stats["head"], 400);
    assert_eq!(stats["segments"].as_u64(), Some(segments.len() as u64));
    assert_eq!(stats["follower_lag_positions"], 0);
    assert!(stats["index_bytes"].as_u64().unwrap() > 0);

    let output = lapilli(&[&"verify", &d]);
    assert_status(&output, 0, "");
    assert!(stdout(&output).starts_with(&format!("intact: {} segments, 400 events", segments.len())), "{}", stdout(&output));
}

/// The byte offset of the record of `position` in the first segment.
fn record_offset(segment: &Path, position: u64) -> usize {
    let bytes = std::fs::read(segment).unwrap();
    let (mut at, mut seen) = (32usize, 0u64);
    loop {
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        if bytes[at + 8] == 1 {
            seen += 1;
            if seen == position {
                return at;
            }
        }
        at += 8 + len;
    }
}

/// A flipped byte in an index file's body (format 2: checked in 4 KiB blocks) is reported with
/// the file and the block, with its byte range.
#[test]
fn verify_names_the_damaged_block_of_an_index_file() {
    let dir = tempfile::tempdir().unwrap();
    filled(dir.path()).close().unwrap();
    let index = dir.path().join(format!("{:020}.idx", 1));
    let file = std::fs::OpenOptions::new().read(true).write(true).open(&index).unwrap();
    // A byte of the sixth event's offset (the offsets follow the 128-byte header).
    let at = 128 + 8 * 5 + 1;
    let mut byte = [0u8];
    file.read_exact_at(&mut byte, at).unwrap();
    file.write_all_at(&[byte[0] ^ 0x10], at).unwrap();
    let output = lapilli(&[&"verify", &dir.path()]);
    assert_eq!(output.status.code(), Some(1));
    let text = stdout(&output);
    assert!(text.starts_with(&format!("fault: {} ", index.display())), "{text}");
    assert!(text.contains("block 0 (bytes 128.."), "{text}");
    assert!(text.contains("does not match its checksum"), "{text}");
}

#[test]
fn verify_reports_a_flipped_byte_with_its_segment_offset_and_position() {
    let dir = tempfile::tempdir().unwrap();
    filled(dir.path()).close().unwrap();
    let segment = dir.path().join(format!("{:020}.log", 1));
    let offset = record_offset(&segment, 37);
    let file = std::fs::OpenOptions::new().read(true).write(true).open(&segment).unwrap();
    let mut byte = [0u8];
    file.read_exact_at(&mut byte, offset as u64 + 12).unwrap();
    file.write_all_at(&[byte[0] ^ 0x10], offset as u64 + 12).unwrap();
    let output = lapilli(&[&"verify", &dir.path()]);
    assert_eq!(output.status.code(), Some(1));
    let text = stdout(&output);
    assert!(
        text.starts_with(&format!("fault: {} at byte {offset}, position 37: ", segment.display())),
        "{text}"
    );
    let output = lapilli(&[&"verify", &dir.path(), &"--json"]);
    assert_eq!(output.status.code(), Some(1));
    let report: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(report["intact"], false);
    assert_eq!(report["fault"]["position"], 37);
    assert_eq!(report["fault"]["offset"].as_u64(), Some(offset as u64));
}

#[test]
fn export_jsonl_imports_back_into_the_same_events() {
    let dir = tempfile::tempdir().unwrap();
    filled(dir.path()).close().unwrap();
    let out = dir.path().join("out.jsonl");
    let output = lapilli(&[&"export", &dir.path(), &"--format", &"jsonl", &out, &"--tag", &"customer:1"]);
    assert_status(&output, 0, "");
    let copy = tempfile::tempdir().unwrap();
    let target = copy.path().join("copy");
    let output = lapilli(&[&"import", &target, &out, &"--batch", &"7"]);
    assert_status(&output, 0, "");
    assert_eq!(stdout(&output), "appended 133 events at positions 1..133\n");
    let original = all_events(dir.path(), &Query::for_tags(["customer:1"]), ReadOptions::default());
    let imported = all_events(&target, &Query::all(), ReadOptions::default());
    assert_eq!(imported.len(), original.len());
    for (a, b) in original.iter().zip(&imported) {
        assert_eq!((&a.event_type, &a.tags, &a.data), (&b.event_type, &b.tags, &b.data));
    }
    // Not into a store that holds events, unless asked.
    let output = lapilli(&[&"import", &target, &out]);
    assert_status(&output, 2, "--append");
    assert_eq!(all_events(&target, &Query::all(), ReadOptions::default()).len(), 133);
    let output = lapilli(&[&"import", &target, &out, &"--append"]);
    assert_status(&output, 0, "");
    assert_eq!(all_events(&target, &Query::all(), ReadOptions::default()).len(), 266);
}

#[test]
fn import_reports_the_first_bad_line_by_number_and_appends_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    let target = dir.path().join("store");
    let good = r#"{"type":"A","tags":["k:1"],"data":"x"}"#;
    let cases = [
        (r#"{"type":"A","tags":["k:1","k:1"]}"#, "line 3: duplicate tag \"k:1\""),
        (r#"{"type":"","tags":[]}"#, "line 3: type is empty"),
        (r#"{"type":"A","tags":"k:1"}"#, "line 3: tags is \"k:1\""),
        (r#"{"type":"A","data_base64":"%%%"}"#, "line 3: data_base64 is not base64"),
        (r#"{"type":"A","colour":"red"}"#, "line 3: unknown field \"colour\""),
        (r#"not json"#, "line 3: not JSON"),
        (r#"{"tags":["k:1"]}"#, "line 3: has no type"),
    ];
    for (bad, message) in cases {
        std::fs::write(&input, format!("{good}\n\n{bad}\n{good}\n")).unwrap();
        let output = lapilli(&[&"import", &target, &input, &"--dry-run"]);
        assert_status(&output, 1, message);
        let output = lapilli(&[&"import", &target, &input]);
        assert_status(&output, 1, message);
        assert!(!target.exists(), "nothing was created for {bad}");
    }
    std::fs::write(&input, format!("{good}\n{good}\n")).unwrap();
    let output = lapilli(&[&"import", &target, &input, &"--dry-run"]);
    assert_status(&output, 0, "");
    assert!(stdout(&output).starts_with("2 events in"), "{}", stdout(&output));
    assert!(!target.exists(), "a dry run appends nothing");
    let output = lapilli(&[&"import", &target, &dir.path().join("missing.jsonl")]);
    assert_status(&output, 2, "missing.jsonl");
}

#[test]
fn commands_work_while_a_writer_holds_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = filled(dir.path());
    let d = dir.path();
    let output = lapilli(&[&"info", &d, &"--json"]);
    assert_status(&output, 0, "");
    let info: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(info["writer_pid"].as_u64(), Some(std::process::id() as u64));
    assert_eq!(info["head"], 400);
    let output = lapilli(&[&"verify", &d]);
    assert_status(&output, 0, "");
    let output = lapilli(&[&"types", &d]);
    assert_eq!(stdout(&output).lines().count(), 3);
    let output = lapilli(&[&"import", &d, &d.join("whatever.jsonl")]);
    assert_status(&output, 2, "whatever.jsonl");

    // tail: the last events, then live commits until killed.
    let output = lapilli(&[&"tail", &d, &"-n", &"3", &"--format", &"jsonl", &"--tag", &"customer:0"]);
    let positions: Vec<u64> = jsonl(&stdout(&output)).iter().map(|v| v["position"].as_u64().unwrap()).collect();
    assert_eq!(positions, vec![394, 397, 400]);
    let mut child = Command::new(env!("CARGO_BIN_EXE_lapilli"))
        .arg("tail")
        .arg(d)
        .args(["-f", "-n", "1", "--format", "jsonl", "--tag", "live:1"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    // Appended while the child runs: some before it subscribes, some after; it prints each once.
    let deadline = Instant::now() + Duration::from_secs(20);
    let writer = std::thread::spawn({
        let store = store;
        move || {
            for i in 0..5u64 {
                store.append(vec![Event::new("Live", ["live:1"], format!("{i}").into_bytes())], None).unwrap();
                std::thread::sleep(Duration::from_millis(50));
            }
            store
        }
    });
    let mut seen = Vec::new();
    while seen.len() < 5 {
        assert!(Instant::now() < deadline, "tail -f printed {seen:?}");
        let line = lines.next().expect("tail -f keeps running").unwrap();
        seen.push(serde_json::from_str::<Value>(&line).unwrap()["data"].as_str().unwrap().to_owned());
    }
    // The first line may be the last event before it started (-n 1), never a repeat.
    let expected: Vec<String> = (0..5).map(|i| i.to_string()).collect();
    assert!(seen == expected || (seen[1..] == expected[seen.len() - 4..] && expected.contains(&seen[0])), "{seen:?}");
    child.kill().unwrap();
    let _ = child.wait();
    let store = writer.join().unwrap();

    let output = lapilli(&[&"stats", &d, &"--json"]);
    let stats: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(stats["head"], 405);
    assert_eq!(stats["writer_pid"].as_u64(), Some(std::process::id() as u64));
    store.close().unwrap();
}

#[test]
fn bad_usage_is_exit_status_2_with_one_line_naming_the_value() {
    let dir = tempfile::tempdir().unwrap();
    filled(dir.path()).close().unwrap();
    let d = dir.path();
    let missing = d.join("no-such-store");
    assert_status(&lapilli(&[&"read", &missing]), 2, "no-such-store");
    assert_status(&lapilli(&[&"info", &d.join("00000000000000000001.log")]), 2, "not a directory");
    let empty = tempfile::tempdir().unwrap();
    assert_status(&lapilli(&[&"types", &empty.path()]), 2, "no store at");
    assert_status(&lapilli(&[&"read", &d, &"--limit", &"many"]), 2, "'many'");
    assert_status(&lapilli(&[&"read", &d, &"--format", &"xml"]), 2, "'xml'");
    assert_status(&lapilli(&[&"read", &d, &"--after", &"9999"]), 2, "after is 9999");
    assert_status(&lapilli(&[&"read", &d, &"--after", &"5", &"--until", &"4"]), 2, "until is 4");
    assert_status(&lapilli(&[&"read", &d, &"--tag", &""]), 2, "empty");
    assert_status(&lapilli(&[&"read", &d, &"--format", &"jsonl", &"--data", &"raw"]), 2, "--data raw");
    assert_status(&lapilli(&[&"export", &d, &"--format", &"csv", &d.join("x")]), 2, "'csv'");
    assert_status(&lapilli(&[&"import", &d, &d.join("x"), &"--batch", &"0"]), 2, "'0'");
    assert_status(&lapilli(&[&"frobnicate", &d]), 2, "'frobnicate'");
    assert_status(&lapilli(&[&"read"]), 2, "<DIR>");
    assert_eq!(lapilli(&[]).status.code(), Some(2));
}

#[test]
fn every_command_has_help_with_an_example() {
    for command in ["info", "types", "tags", "read", "tail", "export", "import", "verify", "stats"] {
        let output = lapilli(&[&command, &"--help"]);
        assert_status(&output, 0, "");
        let help = stdout(&output);
        assert!(help.contains("Example:\n  lapilli ") && help.contains(&format!("lapilli {command} ")), "{command}: {help}");
    }
    let output = lapilli(&[&"--help"]);
    assert_status(&output, 0, "");
    assert!(stdout(&output).contains("Example:"));
}

/// Writes the columnar exports `run.sh` reads back with pyarrow and DuckDB, and the facts they
/// must find, into `LAPILLI_CLI_EXPORTS` (skipped when it is not set).
#[test]
fn columnar_exports_for_the_python_readers() {
    let Some(out) = std::env::var_os("LAPILLI_CLI_EXPORTS").map(PathBuf::from) else { return };
    std::fs::create_dir_all(&out).unwrap();
    let dir = tempfile::tempdir().unwrap();
    filled(dir.path()).close().unwrap();
    for (format, file) in [("parquet", "events.parquet"), ("arrow", "events.arrow"), ("jsonl", "events.jsonl")] {
        assert_status(&lapilli(&[&"export", &dir.path(), &"--format", &format, &out.join(file)]), 0, "");
    }
    assert_status(&lapilli(&[&"export", &dir.path(), &"--format", &"parquet", &out.join("paid.parquet"), &"--type", &"Paid", &"--after", &"100"]), 0, "");
    let events = all_events(dir.path(), &Query::all(), ReadOptions::default());
    let expected: Vec<Value> = events
        .iter()
        .map(|e| {
            serde_json::json!({
                "position": e.position.get(),
                "recorded_at": e.recorded_at,
                "type": e.event_type,
                "tags": e.tags,
                "data": e.data.iter().map(|b| format!("{b:02x}")).collect::<String>(),
            })
        })
        .collect();
    std::fs::write(out.join("expected.json"), serde_json::to_string(&expected).unwrap()).unwrap();
}
