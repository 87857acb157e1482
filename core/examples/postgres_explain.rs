//! What PostgreSQL does with the backend's statements on a context of a million events:
//! `EXPLAIN (ANALYZE, BUFFERS)` of the condition check (boundary and existence clause, as the
//! writer sends them) and of selective reads by tag, by type and by type and tag.
//!
//! ```sh
//! eval "$(scripts/postgres.sh start)"
//! cargo run --release -p lapilli-core --features postgres --example postgres_explain -- 1000000
//! ```
//!
//! The events: 10,000 entities (`entity:<n>`, ~100 events each), 1 tag in 100 also `hot:<n % 10>`
//! (so `hot:x` holds 1/1000), 20 types. bench/README.md records a run's plans.

use std::time::Instant;

use lapilli_core::{Event, Options, Store};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let events: u64 = std::env::args().nth(1).map(|n| n.parse()).transpose()?.unwrap_or(1_000_000);
    let base = std::env::var("LAPILLI_TEST_POSTGRES_URL").map_err(|_| "set LAPILLI_TEST_POSTGRES_URL")?;
    let context = format!("explain_{}", std::process::id());
    let separator = if base.contains('?') { '&' } else { '?' };
    let store = Store::open(format!("{base}{separator}context={context}"), Options::default())?;
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
    let head = store.head()?.get() as i64;
    store.close()?;

    let mut client = postgres::Client::connect(&base, postgres::NoTls)?;
    let table = format!("\"lapilli_events_{context}\"");
    client.batch_execute(&format!("ANALYZE {table}"))?;
    let stale = head / 2;
    let cases = [
        (
            "(rejected) the existence clause ordered by the primary key: a walk of the whole table",
            format!("SELECT (SELECT position FROM {table} WHERE ((tags @> ARRAY['unique:abc']::text[])) ORDER BY position LIMIT 1)"),
        ),
        (
            "condition check: type and tag after head (the usual: nothing new), plus an existence clause",
            format!(
                "SELECT (SELECT position FROM {table} WHERE position > {head} AND ((type = ANY(ARRAY['Type3']) AND tags @> ARRAY['entity:42']::text[])) ORDER BY position LIMIT 1), \
                 (SELECT position FROM {table} WHERE ((tags @> ARRAY['unique:abc']::text[])) ORDER BY position + 0 LIMIT 1)"
            ),
        ),
        (
            "condition check: a stale cursor (after = head / 2) on an entity's tag",
            format!(
                "SELECT (SELECT position FROM {table} WHERE position > {stale} AND ((tags @> ARRAY['entity:42']::text[])) ORDER BY position LIMIT 1)"
            ),
        ),
        (
            "read: one entity's events (~100)",
            format!(
                "SELECT position, type, tags, data, recorded_at FROM {table} WHERE position BETWEEN 1 AND {head} AND ((tags @> ARRAY['entity:42']::text[])) ORDER BY position ASC LIMIT 256"
            ),
        ),
        (
            "read: a tag holding 1/1000 of the log, backwards, limit 1 (newest)",
            format!(
                "SELECT position, type, tags, data, recorded_at FROM {table} WHERE position BETWEEN 1 AND {head} AND ((tags @> ARRAY['hot:3']::text[])) ORDER BY position DESC LIMIT 1"
            ),
        ),
        (
            "read: one type (1/20 of the log), first page",
            format!(
                "SELECT position, type, tags, data, recorded_at FROM {table} WHERE position BETWEEN 1 AND {head} AND ((type = ANY(ARRAY['Type7']))) ORDER BY position ASC LIMIT 256"
            ),
        ),
    ];
    for (what, sql) in cases {
        println!("\n### {what}\n\n```");
        for row in client.query(&format!("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) {sql}"), &[])? {
            println!("{}", row.get::<_, &str>(0));
        }
        println!("```");
    }
    client.batch_execute(&format!("DROP TABLE {table}; DROP FUNCTION IF EXISTS \"lapilli_merge_{context}\"(); DELETE FROM lapilli_contexts WHERE name = '{context}'"))?;
    Ok(())
}
