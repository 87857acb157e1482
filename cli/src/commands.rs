//! The commands. Each opens the store read-only (a follower) except `import`.

use std::io::{BufRead, BufWriter, Write};
use std::path::Path;
use std::time::Duration;

use base64::Engine;
use lapilli_core::{
    Event, Next, Options, Position, Query, QueryItem, ReadOptions, Store, DEFAULT_MAX_EVENT_BYTES,
    INDEX_FILE_FORMAT_VERSION, SEGMENT_FORMAT_VERSION,
};
use serde_json::{Value, json};

use crate::args::{Cli, Command, QueryArgs, WindowArgs};
use crate::render::{EventWriter, timestamp};
use crate::{Failure, Outcome};

pub fn run(cli: Cli) -> Outcome<i32> {
    match cli.command {
        Command::Info { dir, json } => info(&dir, json),
        Command::Types { dir, json } => {
            let store = open_read_only(&dir)?;
            vocabulary(store.types()?, json)
        }
        Command::Tags { dir, prefix, json } => {
            let store = open_read_only(&dir)?;
            vocabulary(store.tags(&prefix)?, json)
        }
        Command::Read { dir, query, window, output } => {
            let store = open_read_only(&dir)?;
            let mut writer = EventWriter::new(stdout(), output.format, output.data)?;
            let mut read = store.read(&query_of(&query), read_options(&window))?;
            loop {
                let batch = read.next_batch(1024)?;
                if batch.is_empty() {
                    break;
                }
                for event in &batch {
                    writer.write(event)?;
                }
            }
            writer.finish()?;
            Ok(0)
        }
        Command::Tail { dir, query, lines, follow, output } => tail(&dir, &query, lines, follow, output),
        Command::Export { dir, format, out, query, window } => {
            let store = open_read_only(&dir)?;
            crate::export::export(&store, format, &out, &query_of(&query), read_options(&window))?;
            Ok(0)
        }
        Command::Import { dir, input, batch, append, dry_run } => import(&dir, &input, batch, append, dry_run),
        Command::Verify { dir, json } => verify(&dir, json),
        Command::Stats { dir, json } => stats(&dir, json),
    }
}

fn stdout() -> BufWriter<std::io::StdoutLock<'static>> {
    BufWriter::with_capacity(64 << 10, std::io::stdout().lock())
}

/// A store must be there: a follower opened on a missing directory would fail with `Io`, and
/// on a directory that is not a store it would wait for a writer that never comes.
fn check_store_dir(dir: &Path) -> Outcome {
    let meta = std::fs::metadata(dir).map_err(|e| Failure::Usage(format!("no store at {}: {e}", dir.display())))?;
    if !meta.is_dir() {
        return Err(Failure::Usage(format!("no store at {}: not a directory", dir.display())));
    }
    let entries = std::fs::read_dir(dir).map_err(|e| Failure::Failed(format!("cannot read {}: {e}", dir.display())))?;
    let is_store = entries.flatten().any(|entry| {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        name == "LOCK" || name.ends_with(".log")
    });
    if !is_store {
        return Err(Failure::Usage(format!("no store at {}: it holds no LOCK and no segment", dir.display())));
    }
    Ok(())
}

pub fn open_read_only(dir: &Path) -> Outcome<Store> {
    check_store_dir(dir)?;
    Ok(Store::open_read_only(dir)?)
}

fn query_of(args: &QueryArgs) -> Query {
    if args.types.is_empty() && args.tags.is_empty() {
        Query::all()
    } else {
        Query::of([QueryItem::new(args.types.clone(), args.tags.clone())])
    }
}

fn read_options(window: &WindowArgs) -> ReadOptions {
    ReadOptions {
        after: Position(window.after),
        until: window.until.map(Position),
        limit: window.limit,
        backwards: window.backwards,
    }
}

fn print_json(value: &Value) -> Outcome {
    let mut out = stdout();
    serde_json::to_writer_pretty(&mut out, value).map_err(std::io::Error::from)?;
    writeln!(out)?;
    out.flush()?;
    Ok(())
}

fn vocabulary(entries: Vec<(String, u64)>, json: bool) -> Outcome<i32> {
    if json {
        let object: serde_json::Map<String, Value> = entries.into_iter().map(|(name, n)| (name, json!(n))).collect();
        print_json(&Value::Object(object))?;
    } else {
        let mut out = stdout();
        for (name, count) in entries {
            writeln!(out, "{count:>10}  {name}")?;
        }
        out.flush()?;
    }
    Ok(0)
}

/// The pid of the process holding the store's lock, from the kernel's table of locks (the
/// `LOCK` file's inode in `/proc/locks`): asking by taking the lock, even shared and for an
/// instant, could make a writer starting at that moment fail with `StoreLocked`.
pub fn lock_holder(dir: &Path) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(dir.join("LOCK")).ok()?;
    let (major, minor) = (libc::major(meta.dev()), libc::minor(meta.dev()));
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    locks.lines().find_map(|line| {
        // "1: FLOCK  ADVISORY  WRITE 4242 08:01:1234567 0 EOF"
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (kind, pid, file) = (fields.get(1)?, fields.get(4)?, fields.get(5)?);
        if *kind != "FLOCK" {
            return None;
        }
        let mut parts = file.split(':');
        let dev_major = u32::from_str_radix(parts.next()?, 16).ok()?;
        let dev_minor = u32::from_str_radix(parts.next()?, 16).ok()?;
        let inode: u64 = parts.next()?.parse().ok()?;
        (inode == meta.ino() && dev_major == major && dev_minor == minor).then(|| pid.parse().ok())?
    })
}

/// The format version in bytes 8..12 of a segment or index file.
fn file_format_version(path: &Path) -> Option<u32> {
    use std::os::unix::fs::FileExt;
    let file = std::fs::File::open(path).ok()?;
    let mut bytes = [0u8; 4];
    file.read_exact_at(&mut bytes, 8).ok()?;
    Some(u32::from_le_bytes(bytes))
}

fn info(dir: &Path, as_json: bool) -> Outcome<i32> {
    let store = open_read_only(dir)?;
    let head = store.head()?.get();
    let first_last = |backwards| -> Outcome<Option<u64>> {
        let options = ReadOptions { limit: Some(1), backwards, ..ReadOptions::default() };
        Ok(store.read(&Query::all(), options)?.next_batch(1)?.first().map(|e| e.recorded_at))
    };
    let (first_at, last_at) = (first_last(false)?, first_last(true)?);
    let segments = store.segments()?;
    let mut bytes_on_disk = 0u64;
    let mut index_bytes = 0u64;
    for entry in std::fs::read_dir(dir).map_err(|e| Failure::Failed(format!("cannot read {}: {e}", dir.display())))?.flatten() {
        let len = entry.metadata().map(|m| m.len()).unwrap_or(0);
        bytes_on_disk += len;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.ends_with(".idx") || name.ends_with(".part") {
            index_bytes += len;
        }
    }
    let segment_version = segments.first().and_then(|s| file_format_version(&s.path));
    let index_version = std::fs::read_dir(dir)
        .ok()
        .and_then(|entries| {
            entries.flatten().map(|e| e.path()).find(|p| p.extension().is_some_and(|x| x == "idx" || x == "part"))
        })
        .and_then(|p| file_format_version(&p));
    let writer_pid = lock_holder(dir);
    // What is on disk for each segment (a follower answers the active segment from memory
    // whatever files exist, so the handle's own view would say less).
    let index_state = |segment: &lapilli_core::SegmentInfo| {
        if segment.path.with_extension("idx").exists() {
            return "index file".to_string();
        }
        let stem = segment.path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        let parts = std::fs::read_dir(dir)
            .map(|entries| {
                entries
                    .flatten()
                    .filter(|e| {
                        let name = e.file_name();
                        let name = name.to_string_lossy();
                        name.starts_with(&format!("{stem}.")) && name.ends_with(".part")
                    })
                    .count()
            })
            .unwrap_or(0);
        match parts {
            0 => "no index file (indexed in memory)".to_string(),
            n => format!("{n} part index file{}", if n == 1 { "" } else { "s" }),
        }
    };
    if as_json {
        let segments: Vec<Value> = segments
            .iter()
            .map(|s| {
                json!({
                    "file": s.path.file_name().map(|n| n.to_string_lossy().into_owned()),
                    "base": s.base.get(),
                    "last": s.last.map(Position::get),
                    "events": s.events(),
                    "file_bytes": s.file_bytes,
                    "sealed": s.sealed,
                    "index": index_state(s),
                })
            })
            .collect();
        print_json(&json!({
            "dir": dir.display().to_string(),
            "head": head,
            "events": head,
            "first_recorded_at": first_at.map(timestamp),
            "last_recorded_at": last_at.map(timestamp),
            "segments": segments,
            "bytes_on_disk": bytes_on_disk,
            "index_bytes": index_bytes,
            "segment_format_version": segment_version,
            "index_format_version": index_version,
            "supported_format_versions": {"segment": SEGMENT_FORMAT_VERSION, "index": INDEX_FILE_FORMAT_VERSION},
            "writer_pid": writer_pid,
        }))?;
        return Ok(0);
    }
    let mut out = stdout();
    let or_none = |t: Option<u64>| t.map_or_else(|| "-".to_string(), timestamp);
    writeln!(out, "store          {}", dir.display())?;
    writeln!(out, "head           {head}")?;
    writeln!(out, "events         {head}")?;
    writeln!(out, "first event    {}", or_none(first_at))?;
    writeln!(out, "last event     {}", or_none(last_at))?;
    writeln!(out, "bytes on disk  {bytes_on_disk} (index files {index_bytes})")?;
    let version = |v: Option<u32>| v.map_or_else(|| "-".to_string(), |v| v.to_string());
    writeln!(out, "formats        segment {}, index {}", version(segment_version), version(index_version))?;
    match writer_pid {
        Some(pid) => writeln!(out, "writer         pid {pid}")?,
        None => writeln!(out, "writer         none")?,
    }
    writeln!(out, "segments       {}", segments.len())?;
    for s in &segments {
        writeln!(
            out,
            "  {}  positions {}..{}  {} events  {} bytes  {}  {}",
            s.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
            s.base.get(),
            s.last.map_or_else(|| "-".to_string(), |l| l.get().to_string()),
            s.events(),
            s.file_bytes,
            if s.sealed { "sealed" } else { "active" },
            index_state(s),
        )?;
    }
    out.flush()?;
    Ok(0)
}

fn tail(dir: &Path, query: &QueryArgs, lines: u64, follow: bool, output: crate::args::OutputArgs) -> Outcome<i32> {
    let store = open_read_only(dir)?;
    let query = query_of(query);
    let mut writer = EventWriter::new(stdout(), output.format, output.data)?;
    let mut read = store.read(&query, ReadOptions { limit: Some(lines), backwards: true, ..ReadOptions::default() })?;
    let head = read.head();
    let mut last = read.next_batch(lines.min(100_000) as usize)?;
    last.reverse();
    for event in &last {
        writer.write(event)?;
    }
    writer.flush()?;
    if follow {
        let subscription = store.subscribe(&query, head)?;
        loop {
            match subscription.next(Some(Duration::from_millis(500)))? {
                Next::Event(event) => {
                    writer.write(&event)?;
                    writer.flush()?;
                }
                Next::TimedOut => {}
                Next::Ended => break,
            }
        }
    }
    writer.finish()?;
    Ok(0)
}

/// One line of an import file, checked.
fn parse_line(line: &str, number: u64, input: &Path) -> Outcome<Event> {
    let bad = |why: String| Failure::Failed(format!("{}: line {number}: {why}", input.display()));
    let value: Value = serde_json::from_str(line).map_err(|e| bad(format!("not JSON: {e}")))?;
    let Value::Object(object) = value else { return Err(bad("not a JSON object".into())) };
    let mut event_type = None;
    let mut tags = Vec::new();
    let mut data: Option<Vec<u8>> = None;
    for (key, value) in &object {
        match key.as_str() {
            "type" => match value {
                Value::String(t) => event_type = Some(t.clone()),
                other => return Err(bad(format!("type is {other}; it must be a string"))),
            },
            "tags" => match value {
                Value::Array(items) => {
                    for item in items {
                        match item {
                            Value::String(tag) => tags.push(tag.clone()),
                            other => return Err(bad(format!("tag {other} is not a string"))),
                        }
                    }
                }
                other => return Err(bad(format!("tags is {other}; it must be an array of strings"))),
            },
            "data" | "data_base64" | "data_hex" => {
                if data.is_some() {
                    return Err(bad("has more than one of data, data_base64 and data_hex".into()));
                }
                let Value::String(text) = value else {
                    return Err(bad(format!("{key} is {value}; it must be a string")));
                };
                data = Some(match key.as_str() {
                    "data" => text.clone().into_bytes(),
                    "data_base64" => base64::engine::general_purpose::STANDARD
                        .decode(text)
                        .map_err(|e| bad(format!("data_base64 is not base64: {e}")))?,
                    _ => decode_hex(text).ok_or_else(|| bad(format!("data_hex {text:?} is not hex")))?,
                });
            }
            // What export writes beside the event; the store assigns new ones.
            "position" | "recorded_at" => {}
            other => return Err(bad(format!("unknown field {other:?}"))),
        }
    }
    let event_type = event_type.ok_or_else(|| bad("has no type".into()))?;
    let event = Event::new(event_type, tags, data.unwrap_or_default());
    event.validate(&format!("line {number}"), DEFAULT_MAX_EVENT_BYTES).map_err(|e| {
        Failure::Failed(format!("{}: {}", input.display(), e.message()))
    })?;
    Ok(event)
}

fn decode_hex(text: &str) -> Option<Vec<u8>> {
    if text.len() % 2 != 0 {
        return None;
    }
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok()).collect()
}

/// Calls `visit` with each non-blank line of `input` and its line number.
fn each_line(input: &Path, mut visit: impl FnMut(&str, u64) -> Outcome) -> Outcome {
    let file = std::fs::File::open(input).map_err(|e| Failure::Usage(format!("cannot open {}: {e}", input.display())))?;
    let reader = std::io::BufReader::with_capacity(1 << 20, file);
    for (i, line) in reader.lines().enumerate() {
        let number = i as u64 + 1;
        let line = line.map_err(|e| Failure::Failed(format!("{}: line {number}: cannot read: {e}", input.display())))?;
        if line.trim().is_empty() {
            continue;
        }
        visit(&line, number)?;
    }
    Ok(())
}

fn import(dir: &Path, input: &Path, batch: u64, append: bool, dry_run: bool) -> Outcome<i32> {
    // Every line first: a bad one stops the import before anything is appended.
    let mut events = 0u64;
    each_line(input, |line, number| {
        parse_line(line, number, input)?;
        events += 1;
        Ok(())
    })?;
    let refuse = |head: u64| {
        Failure::Usage(format!(
            "the store at {} already holds {head} events; pass --append to add to it",
            dir.display()
        ))
    };
    if dry_run {
        if dir.exists() {
            if let Ok(store) = open_read_only(dir) {
                let head = store.head()?.get();
                if head > 0 && !append {
                    return Err(refuse(head));
                }
            }
        }
        println!("{events} events in {} are valid; nothing was appended (--dry-run)", input.display());
        return Ok(0);
    }
    let store = Store::open(dir, Options::default())?;
    let head = store.head()?.get();
    if head > 0 && !append {
        return Err(refuse(head));
    }
    let bar = indicatif::ProgressBar::new(events);
    let mut pending = Vec::with_capacity(batch as usize);
    let mut appended = 0u64;
    let mut flush = |pending: &mut Vec<Event>| -> Outcome {
        if pending.is_empty() {
            return Ok(());
        }
        let n = pending.len() as u64;
        store.append(std::mem::take(pending), None)?;
        appended += n;
        bar.inc(n);
        Ok(())
    };
    each_line(input, |line, number| {
        pending.push(parse_line(line, number, input)?);
        if pending.len() as u64 >= batch {
            flush(&mut pending)?;
        }
        Ok(())
    })?;
    flush(&mut pending)?;
    bar.finish_and_clear();
    let last = store.head()?.get();
    store.close()?;
    println!("appended {appended} events at positions {}..{last}", head + 1);
    Ok(0)
}

fn verify(dir: &Path, as_json: bool) -> Outcome<i32> {
    check_store_dir(dir)?;
    let writer = lock_holder(dir);
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template("verifying {bar:40} {bytes}/{total_bytes}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let report = lapilli_core::verify(dir, writer.is_some(), |done, total| {
        bar.set_length(total);
        bar.set_position(done);
    })?;
    bar.finish_and_clear();
    if as_json {
        print_json(&json!({
            "intact": report.fault.is_none(),
            "segments": report.segments,
            "events": report.events,
            "index_files": report.index_files,
            "log_bytes": report.log_bytes,
            "writer_pid": writer,
            "fault": report.fault.as_ref().map(|f| json!({
                "file": f.file.display().to_string(),
                "offset": f.offset,
                "position": f.position.get(),
                "reason": f.reason,
            })),
        }))?;
    } else {
        let mut out = stdout();
        match &report.fault {
            None => writeln!(
                out,
                "intact: {} segment{}, {} events, {} index file{} checked",
                report.segments,
                if report.segments == 1 { "" } else { "s" },
                report.events,
                report.index_files,
                if report.index_files == 1 { "" } else { "s" },
            )?,
            Some(fault) => writeln!(
                out,
                "fault: {} at byte {}, position {}: {}",
                fault.file.display(),
                fault.offset,
                fault.position.get(),
                fault.reason
            )?,
        }
        out.flush()?;
    }
    Ok(if report.fault.is_some() { 1 } else { 0 })
}

fn stats(dir: &Path, as_json: bool) -> Outcome<i32> {
    let store = open_read_only(dir)?;
    let s = store.stats()?;
    let writer_pid = lock_holder(dir);
    if as_json {
        print_json(&json!({
            "head": s.head,
            "segments": s.segments,
            "index_bytes": s.index_bytes,
            "subscriptions": s.subscriptions,
            "follower_lag_positions": s.follower_lag_positions,
            "follower_lag_millis": s.follower_lag_millis,
            "events_appended": s.events_appended,
            "bytes_appended": s.bytes_appended,
            "group_commits": s.group_commits,
            "events_per_commit_mean": s.events_per_commit_mean,
            "events_per_commit_max": s.events_per_commit_max,
            "fsyncs": s.fsyncs,
            "fsync_p50_micros": s.fsync_p50_micros,
            "fsync_p99_micros": s.fsync_p99_micros,
            "fsync_max_micros": s.fsync_max_micros,
            "queue_depth": s.queue_depth,
            "queue_depth_max": s.queue_depth_max,
            "writer_pid": writer_pid,
        }))?;
        return Ok(0);
    }
    let mut out = stdout();
    writeln!(out, "head                 {}", s.head)?;
    writeln!(out, "segments             {}", s.segments)?;
    writeln!(out, "index bytes          {}", s.index_bytes)?;
    writeln!(out, "writer               {}", writer_pid.map_or_else(|| "none".to_string(), |p| format!("pid {p}")))?;
    writeln!(
        out,
        "lag behind writer    {} positions, {} ms",
        s.follower_lag_positions.unwrap_or(0),
        s.follower_lag_millis.unwrap_or(0)
    )?;
    writeln!(out, "(write counters, fsync latency and queue depth are the writer's: read them from its store.stats())")?;
    out.flush()?;
    Ok(0)
}
