//! The tags index's pending list on a Postgres context: the writer merges it in every group's
//! transaction, so no committed state leaves one for tag looks to scan, whether or not the
//! writer's user owns the tables; and a writer that may not merge still appends. Needs
//! `LAPILLI_TEST_POSTGRES_URL` (`scripts/postgres.sh start`, whose user is the cluster's
//! superuser, so it can make a role that owns nothing); without it every test says it was
//! skipped, unless `LAPILLI_REQUIRE_POSTGRES` is set.

mod common;

use common::postgres::{as_user, change_privileges, context_url, database_url, fresh_context, merge_batch, pending_pages};
use lapilli_core::{Options, Query, ReadOptions, Store};

/// A new context made by the superuser, and a role that owns nothing and may do only what a
/// writer does: (the context, the role, the role's URL of the context).
fn context_and_writer_role(admin: &mut postgres::Client, base: &str, prefix: &str) -> (String, String, String) {
    let context = fresh_context(prefix);
    // Named after the whole context (its test's prefix too): roles are the cluster's.
    let role = format!("lapilli_w_{context}");
    Store::open(context_url(base, &context), Options::default()).unwrap().close().unwrap();
    change_privileges(
        admin,
        &format!(
            "CREATE ROLE {role} LOGIN NOSUPERUSER; GRANT SELECT, UPDATE ON lapilli_contexts TO {role}; \
             GRANT SELECT, INSERT ON lapilli_events_{context} TO {role};"
        ),
    )
    .unwrap();
    let url = context_url(&as_user(base, &role), &context);
    (context, role, url)
}

fn read_tag(store: &Store, tag: &str) -> usize {
    store.read(&Query::for_tags([tag]), ReadOptions::default()).unwrap().collect_all().unwrap().len()
}

#[test]
fn the_writer_leaves_no_pending_list_and_the_index_has_one() {
    let Some(base) = database_url() else { return };
    let context = fresh_context("merge_owner");
    let store = Store::open(context_url(&base, &context), Options::default()).unwrap();
    let mut admin = postgres::Client::connect(&base, postgres::NoTls).unwrap();
    store.append(merge_batch(0, 2000), None).unwrap();
    assert_eq!(pending_pages(&mut admin, "public", &context), 0, "the writer's group left a pending list");

    // The same rows written past the writer fill a pending list: the index has one, so the
    // zero above is the writer's merge and not an index without `fastupdate`.
    admin
        .batch_execute(&format!(
            "INSERT INTO lapilli_events_{context} SELECT 100000 + i, 'Seeded', ARRAY['entity:x' || i], '\\x01', 0 \
             FROM generate_series(1, 2000) i"
        ))
        .unwrap();
    assert!(pending_pages(&mut admin, "public", &context) > 0, "an insert by another client left no pending list");
    admin.batch_execute(&format!("DELETE FROM lapilli_events_{context} WHERE position > 100000")).unwrap();

    assert_eq!(read_tag(&store, "entity:7"), 1);
    assert_eq!(read_tag(&store, "s10:3"), 200);
    store.close().unwrap();
}

#[test]
fn a_writer_that_owns_nothing_merges_and_one_that_may_not_still_appends() {
    let Some(base) = database_url() else { return };
    let mut admin = postgres::Client::connect(&base, postgres::NoTls).unwrap();
    let (context, role, url) = context_and_writer_role(&mut admin, &base, "merge_role");
    let events = format!("lapilli_events_{context}");

    let store = Store::open(&url, Options::default()).unwrap();
    store.append(merge_batch(0, 2000), None).unwrap();
    assert_eq!(pending_pages(&mut admin, "public", &context), 0, "a writer that does not own the index left a pending list");

    // EXECUTE revoked under an open handle: its next group is refused the merge, rolled back,
    // and decided again without it, so it still commits, and leaves a pending list.
    change_privileges(&mut admin, &format!("REVOKE EXECUTE ON FUNCTION lapilli_merge_{context}() FROM PUBLIC")).unwrap();
    let result = store.append(merge_batch(2000, 2000), None).unwrap();
    assert_eq!((result.first.get(), result.last.get()), (2001, 4000));
    assert_eq!(store.head().unwrap().get(), 4000);
    assert!(pending_pages(&mut admin, "public", &context) > 0, "the writer merged after EXECUTE was revoked");
    store.close().unwrap();

    // Opened again, the handle sees it may not merge, and appends without trying.
    let store = Store::open(&url, Options::default()).unwrap();
    store.append(merge_batch(4000, 2000), None).unwrap();
    assert!(pending_pages(&mut admin, "public", &context) > 0, "a writer that may not merge left no pending list");
    assert_eq!(read_tag(&store, "s10:3"), 600);
    assert_eq!(read_tag(&store, "entity:4321"), 1);
    store.close().unwrap();
    change_privileges(&mut admin, &format!("REVOKE ALL ON lapilli_contexts, {events} FROM {role}; DROP ROLE {role}")).unwrap();
}

/// A writer that comes to append without merging says so on stderr, once: when the merge fails
/// for good under an open handle (`EXECUTE` revoked), and when an open finds a function it may
/// not use (no `EXECUTE`; its index renamed), with the reason; one that merges says nothing.
/// Run in a child process (this test binary again), whose stderr is the parent's to read.
#[test]
fn a_writer_that_stops_merging_or_cannot_merge_says_so_on_stderr() {
    let Some(base) = database_url() else { return };
    let mut admin = postgres::Client::connect(&base, postgres::NoTls).unwrap();
    let (context, role, url) = context_and_writer_role(&mut admin, &base, "merge_said");
    let events = format!("lapilli_events_{context}");
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "merge_said_child", "--ignored", "--nocapture", "--test-threads=1"])
        .env("LAPILLI_MERGE_SAID_URL", url)
        .env("LAPILLI_MERGE_SAID_ADMIN", &base)
        .env("LAPILLI_MERGE_SAID_CONTEXT", &context)
        .output()
        .unwrap();
    let _ = change_privileges(&mut admin, &format!("REVOKE ALL ON lapilli_contexts, {events} FROM {role}; DROP ROLE {role}"));
    let stderr = String::from_utf8_lossy(&child.stderr);
    assert!(child.status.success(), "the child failed: {stderr}");
    let said: Vec<&str> = stderr.lines().filter(|line| line.starts_with("lapilli: ") || line.starts_with("phase ")).collect();
    assert_eq!(said.len(), 6, "{stderr}");
    assert_eq!(said[0], "phase revoked", "a writer that merges said something: {stderr}");
    assert!(said[1].contains("stops merging") && said[1].contains(&context) && said[1].contains("permission denied"), "{stderr}");
    assert_eq!(said[2], "phase reopened", "{stderr}");
    assert!(said[3].contains("cannot merge") && said[3].contains("may not EXECUTE"), "{stderr}");
    assert_eq!(said[4], "phase index renamed", "{stderr}");
    let missing = format!("its index public.lapilli_events_{context}_tags is not there");
    assert!(said[5].contains("cannot merge") && said[5].contains(&missing), "{stderr}");
}

/// The child of the test above: merges, loses `EXECUTE`, appends, opens again and appends, and
/// once more with the tags index renamed.
#[test]
#[ignore = "run by a_writer_that_stops_merging_or_cannot_merge_says_so_on_stderr"]
fn merge_said_child() {
    let (Ok(url), Ok(base), Ok(context)) =
        (std::env::var("LAPILLI_MERGE_SAID_URL"), std::env::var("LAPILLI_MERGE_SAID_ADMIN"), std::env::var("LAPILLI_MERGE_SAID_CONTEXT"))
    else {
        return;
    };
    let mut admin = postgres::Client::connect(&base, postgres::NoTls).unwrap();
    let store = Store::open(&url, Options::default()).unwrap();
    store.append(merge_batch(0, 500), None).unwrap();
    change_privileges(&mut admin, &format!("REVOKE EXECUTE ON FUNCTION lapilli_merge_{context}() FROM PUBLIC")).unwrap();
    eprintln!("phase revoked");
    store.append(merge_batch(500, 500), None).unwrap();
    store.append(merge_batch(1000, 500), None).unwrap();
    store.close().unwrap();
    eprintln!("phase reopened");
    let store = Store::open(&url, Options::default()).unwrap();
    store.append(merge_batch(1500, 500), None).unwrap();
    store.close().unwrap();
    admin.batch_execute(&format!("ALTER INDEX lapilli_events_{context}_tags RENAME TO lapilli_events_{context}_tags_x")).unwrap();
    eprintln!("phase index renamed");
    let store = Store::open(&url, Options::default()).unwrap();
    store.append(merge_batch(2000, 500), None).unwrap();
    assert_eq!(store.head().unwrap().get(), 2500);
    store.close().unwrap();
}
