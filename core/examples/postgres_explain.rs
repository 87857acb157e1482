//! What PostgreSQL does with the statements the backend sends, on a context of a million
//! events: `EXPLAIN (ANALYZE, BUFFERS)` of the writer's condition checks (a fresh cursor with an
//! existence clause, a stale cursor) and of selective reads by tag, by type, and of a tag's
//! newest event, as `auto_explain` logged them while a `Store` made those calls.
//!
//! ```sh
//! export LAPILLI_PG_STATE=/tmp/explain-pg.state
//! eval "$(scripts/postgres.sh start)"
//! cargo run --release -p lapilli-core --features postgres --example postgres_explain -- 1000000
//! ```
//!
//! Not hand-written SQL: the calls go through `Store` on a role of the example's own whose
//! sessions load `auto_explain` (every statement's plan, with its run's figures, into the
//! server's log), and the example prints the plans of the statements those calls sent, read
//! back from the log of the `scripts/postgres.sh` server that `LAPILLI_PG_STATE` names. The
//! role is a superuser (it may load the module, and reads the log): a throwaway server's, so
//! this is for that server only; it is dropped at the end.
//!
//! The events: 10,000 entities (`entity:<n>`, ~100 events each), 1 tag in 100 also `hot:<n % 10>`
//! (so `hot:x` holds 1/1000), 20 types. bench/results/postgres-explain-*.md records a run.

use std::time::Instant;

use lapilli_core::{AppendCondition, Event, Options, Position, Query, QueryItem, ReadOptions, Store};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let events: u64 = std::env::args().nth(1).map(|n| n.parse()).transpose()?.unwrap_or(1_000_000);
    let base = std::env::var("LAPILLI_TEST_POSTGRES_URL").map_err(|_| "set LAPILLI_TEST_POSTGRES_URL")?;
    let state = std::env::var("LAPILLI_PG_STATE").map_err(|_| "set LAPILLI_PG_STATE (the server's log is read)")?;
    let root = std::fs::read_to_string(&state)?
        .lines()
        .find_map(|line| line.strip_prefix("root=").map(str::to_string))
        .ok_or("no root= in LAPILLI_PG_STATE's file")?;
    let log_path = format!("{root}/server.log");
    let context = format!("explain_{}", std::process::id());
    let store = Store::open(with_context(&base, &context), Options::default())?;
    let started = Instant::now();
    let mut i = 0;
    while i < events {
        let n = 5000.min(events - i);
        let batch = (i..i + n)
            .map(|j| {
                let mut tags = vec![format!("entity:{}", j % 10_000)];
                if j % 100 == 0 {
                    tags.push(format!("hot:{}", (j / 100) % 10));
                }
                Event::new(format!("Type{}", j % 20), tags, vec![0x5a; 256])
            })
            .collect();
        store.append(batch, None)?;
        i += n;
    }
    eprintln!("loaded {events} events in {:.1} s", started.elapsed().as_secs_f64());
    store.close()?;

    let mut admin = postgres::Client::connect(&base, postgres::NoTls)?;
    let table = format!("\"lapilli_events_{context}\"");
    // Statistics as autovacuum would have them by now on a store loaded over days.
    admin.batch_execute(&format!("ANALYZE {table}"))?;
    let role = format!("lapilli_explain_{}", std::process::id());
    admin.batch_execute(&format!(
        "CREATE ROLE {role} LOGIN SUPERUSER;
         ALTER ROLE {role} SET session_preload_libraries = 'auto_explain';
         ALTER ROLE {role} SET auto_explain.log_min_duration = 0;
         ALTER ROLE {role} SET auto_explain.log_analyze = on;
         ALTER ROLE {role} SET auto_explain.log_buffers = on;
         ALTER ROLE {role} SET auto_explain.log_timing = on;"
    ))?;
    let log_start = std::fs::metadata(&log_path)?.len();

    let explained = explain_calls(&base, &role, &context);
    let log = std::fs::read(&log_path).map(|bytes| String::from_utf8_lossy(&bytes[log_start as usize..]).into_owned());
    admin.batch_execute(&format!(
        "DROP ROLE {role}; DROP TABLE {table}; DROP FUNCTION IF EXISTS \"lapilli_merge_{context}\"(); \
         DELETE FROM lapilli_contexts WHERE name = '{context}'"
    ))?;
    let calls = explained?;
    let log = log?;
    for (what, marker) in calls {
        println!("\n### {what}\n");
        let plans = plans_between(&log, &marker);
        if plans.is_empty() {
            println!("(no statement of this call was logged)");
        }
        for plan in plans {
            println!("```\n{plan}\n```\n");
        }
    }
    Ok(())
}

/// `url` with `context=` added to its parameters.
fn with_context(url: &str, context: &str) -> String {
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}context={context}")
}

/// Makes each call through a `Store` opened as `role`, with a marker statement logged before
/// it, and returns (what the call is, its marker).
fn explain_calls(base: &str, role: &str, context: &str) -> Result<Vec<(String, String)>, Box<dyn std::error::Error>> {
    let (scheme, rest) = base.split_once("://").ok_or("LAPILLI_TEST_POSTGRES_URL is not a URL")?;
    let host = rest.split_once('@').map_or(rest, |(_, host)| host);
    let as_role = format!("{scheme}://{role}@{host}");
    let store = Store::open(with_context(&as_role, context), Options::default())?;
    let mut marks = postgres::Client::connect(&as_role, postgres::NoTls)?;
    let head = store.head()?.get();
    let mut calls = Vec::new();
    let mut mark = |what: &str| -> Result<String, postgres::Error> {
        let marker = format!("explain-marker-{}", calls.len());
        marks.batch_execute(&format!("SELECT '{marker}'"))?;
        calls.push((what.to_string(), marker.clone()));
        Ok(marker)
    };
    let entity = Query::for_tags(["entity:42"]);

    mark("append under a condition read at the head (the usual decision: nothing new), with an existence clause on an unused key")?;
    let condition = AppendCondition::new(Query::of([QueryItem::new(["Type2"], ["entity:42"])]))
        .after(Position::new(head))
        .fail_if_exists(Query::for_tags(["unique:abc"]));
    store.append(vec![Event::new("Type2", ["entity:42", "unique:abc"], vec![0x5a; 256])], Some(condition))?;

    mark("append under a stale cursor (after = head / 2) on an entity's tag: refused, the first event after it named")?;
    let stale = AppendCondition::new(entity.clone()).after(Position::new(head / 2));
    let refused = store.append(vec![Event::new("Type2", ["entity:42"], vec![0x5a; 256])], Some(stale));
    if refused.is_ok() {
        return Err("the stale cursor was not refused".into());
    }

    mark("read: one entity's events (1 in 10,000 of the log)")?;
    store.read(&entity, ReadOptions::default())?.collect_all()?;

    mark("read: a tag holding 1/1000 of the log, backwards, limit 1 (its newest event)")?;
    store.read(&Query::for_tags(["hot:3"]), ReadOptions { backwards: true, limit: Some(1), ..ReadOptions::default() })?.collect_all()?;

    mark("read: one type (1/20 of the log), first 256 events")?;
    store.read(&Query::for_types(["Type7"]), ReadOptions { limit: Some(256), ..ReadOptions::default() })?.collect_all()?;

    mark("end")?;
    store.close()?;
    calls.pop();
    Ok(calls)
}

/// The plans `auto_explain` logged between `marker`'s statement and the next marker's, with
/// the statement each belongs to, skipping the markers' own and the writer's bookkeeping
/// (locking the context's row, moving its head, merging the tags index: plans of one row).
fn plans_between(log: &str, marker: &str) -> Vec<String> {
    let Some(start) = log.find(&format!("'{marker}'")) else { return Vec::new() };
    let rest = &log[start..];
    let rest = &rest[rest.find('\n').unwrap_or(rest.len())..];
    // Up to the entry of the next marker's statement (its header is on the line before it).
    let next = rest.find("'explain-marker-").unwrap_or(rest.len());
    let end = rest[..next].rfind("LOG:  duration: ").unwrap_or(next);
    let section = &rest[..end];
    // A log line starts with the server's prefix, a timestamp ("2026-12-03 07:39:06.913 UTC").
    let starts_entry = |line: &str| line.len() > 5 && line[..4].bytes().all(|b| b.is_ascii_digit()) && line.as_bytes()[4] == b'-';
    let mut plans = Vec::new();
    // Each entry starts with a log line prefix and "LOG:  duration: ... ms  plan:".
    for entry in section.split("LOG:  duration: ").skip(1) {
        let entry = entry.lines().take_while(|line| !starts_entry(line)).collect::<Vec<_>>().join("\n");
        let bookkeeping = ["FOR UPDATE", "UPDATE lapilli_contexts", "gin_clean_pending_list", "pg_notify", "lapilli_merge_"];
        if bookkeeping.iter().any(|b| entry.contains(b)) {
            continue;
        }
        plans.push(format!("duration: {}", entry.trim_end()));
    }
    plans
}
