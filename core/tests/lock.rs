//! The store lock: one writable handle per directory, across handles of one process and across
//! processes; released by close.
//!
//! The cross-process case re-executes this test binary as the child: `lock_probe_child` does
//! nothing unless `LAPILLI_LOCK_PROBE` names a directory, in which case it tries to open that
//! store and exits with a code saying what happened.

mod common;

use std::path::Path;
use std::process::Stdio;

use lapilli_core::{Durability, ErrorKind, Options, Store};

const PROBE_DIR: &str = "LAPILLI_LOCK_PROBE";
const PROBE_HOLDER: &str = "LAPILLI_LOCK_PROBE_HOLDER";
const LOCKED_BY_HOLDER: i32 = 40;
const LOCKED_WITHOUT_PID: i32 = 41;
const OPENED: i32 = 42;
const OTHER_ERROR: i32 = 43;

fn options() -> Options {
    Options { durability: Durability::Buffered, segment_size: 1 << 16, ..Options::default() }
}

/// The child's side (a no-op when run as an ordinary test).
#[test]
fn lock_probe_child() {
    let Some(dir) = std::env::var_os(PROBE_DIR) else { return };
    let holder = std::env::var(PROBE_HOLDER).unwrap_or_default();
    let code = match Store::open(&dir, options()) {
        Ok(store) => {
            store.close().unwrap();
            OPENED
        }
        Err(e) if e.kind() == ErrorKind::StoreLocked => {
            if e.message().contains(&format!("process {holder}")) {
                LOCKED_BY_HOLDER
            } else {
                eprintln!("{e}");
                LOCKED_WITHOUT_PID
            }
        }
        Err(e) => {
            eprintln!("{e}");
            OTHER_ERROR
        }
    };
    std::process::exit(code);
}

fn probe_from_child(dir: &Path) -> i32 {
    let status = common::child_test("lock_probe_child")
        .env(PROBE_DIR, dir)
        .env(PROBE_HOLDER, std::process::id().to_string())
        .stdout(Stdio::null())
        .status()
        .unwrap();
    status.code().expect("the child was killed by a signal")
}

#[test]
fn a_second_open_in_this_process_is_refused_naming_our_pid() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), options()).unwrap();
    for _ in 0..2 {
        let err = Store::open(dir.path(), options()).err().expect("a second open succeeded");
        assert_eq!(err.kind(), ErrorKind::StoreLocked, "{err}");
        assert!(err.message().contains(&format!("process {}", std::process::id())), "{err}");
        assert!(err.message().contains(&dir.path().display().to_string()), "{err}");
    }
    // The refused opens did not disturb the holder.
    store.append(vec![lapilli_core::Event::new("T", ["a"], vec![])], None).unwrap();
    store.close().unwrap();
    let again = Store::open(dir.path(), options()).unwrap();
    assert_eq!(again.head().unwrap().get(), 1);
    drop(again);
    // Dropping releases it as well.
    Store::open(dir.path(), options()).unwrap();
}

#[test]
fn another_process_is_refused_until_the_holder_closes() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), options()).unwrap();
    assert_eq!(probe_from_child(dir.path()), LOCKED_BY_HOLDER);
    store.close().unwrap();
    assert_eq!(probe_from_child(dir.path()), OPENED);
    // And the child's open and close released it for us again.
    Store::open(dir.path(), options()).unwrap().close().unwrap();
}
