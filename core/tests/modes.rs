//! Who can read the events: the modes of the store's directory and files, and a follower
//! running as another user.
//!
//! The cross-user case re-executes this test binary as the child, under an unprivileged uid:
//! `follower_probe_child` does nothing unless `LAPILLI_MODE_PROBE` names a store, in which case
//! it opens it read-only and prints what happened.

mod common;

use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use common::buffered;
use lapilli_core::{ErrorKind, Event, Options, Store};

fn mode_of(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

/// Appends enough to roll over a few 4 KiB segments, lets the sealer write their index files,
/// then makes an open rebuild one: every kind of file the writer creates is there.
fn fill(dir: &Path, options: &Options) {
    let store = Store::open(dir, options.clone()).unwrap();
    for i in 0..200u32 {
        store.append(vec![Event::new("N", [format!("n:{i}")], vec![1; 40])], None).unwrap();
    }
    store.wait_for_sealing();
    store.close().unwrap();
    let index = common::segment_files(dir)[0].with_extension("idx");
    std::fs::remove_file(&index).unwrap();
    let store = Store::open(dir, options.clone()).unwrap();
    assert_eq!(store.recovery().rebuilt_indexes, vec![index]);
    store.close().unwrap();
}

/// The directory has `dir_mode`, and every file in it `file_mode`; no temporary file is left.
fn check_modes(dir: &Path, dir_mode: u32, file_mode: u32) {
    assert_eq!(mode_of(dir), dir_mode, "mode of {}", dir.display());
    let mut kinds = std::collections::BTreeSet::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        assert_eq!(mode_of(&path), file_mode, "mode of {}", path.display());
        kinds.insert(path.extension().map_or("LOCK".to_string(), |e| e.to_string_lossy().into_owned()));
    }
    // Index files (of sealed segments, and of the active segment's part the close wrote) were
    // written as `.idx.tmp` and renamed, which keeps the mode.
    assert_eq!(kinds.into_iter().collect::<Vec<_>>(), ["LOCK", "idx", "log", "part"]);
}

#[test]
fn a_store_is_its_owners_alone_by_default() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("store");
    let options = buffered(4096);
    assert_eq!(options.file_mode, 0o600);
    fill(&dir, &options);
    assert!(common::segment_files(&dir).len() >= 3);
    check_modes(&dir, 0o700, 0o600);
}

#[test]
fn a_shared_file_mode_is_applied_exactly_whatever_the_umask() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("store");
    // A umask that would narrow 0o640 to 0o600 and leave the follower's group out. The other
    // tests of this binary expect exact modes too, so they do not mind it.
    // SAFETY: umask has no failure mode.
    let old = unsafe { libc::umask(0o077) };
    fill(&dir, &Options { file_mode: 0o640, ..buffered(4096) });
    unsafe { libc::umask(old) };
    check_modes(&dir, 0o750, 0o640);
}

#[test]
fn an_open_makes_every_missing_level_of_its_path() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("x").join("y").join("store");
    let store = Store::open(&dir, Options { file_mode: 0o640, ..buffered(4096) }).unwrap();
    store.append(vec![Event::new("N", ["n:1"], vec![])], None).unwrap();
    store.close().unwrap();
    // The parents get what `mkdir -p` gives them (the umask's), the store its own mode.
    assert!(root.path().join("x").join("y").is_dir());
    assert_eq!(mode_of(&dir), 0o750);
    assert_eq!(Store::open_read_only(&dir).unwrap().head().unwrap().get(), 1);
}

#[test]
fn an_existing_directory_keeps_its_mode() {
    let root = tempfile::tempdir().unwrap();
    std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    let store = Store::open(root.path(), buffered(4096)).unwrap();
    store.close().unwrap();
    assert_eq!(mode_of(root.path()), 0o711);
}

#[test]
fn a_bad_file_mode_is_refused_and_creates_nothing() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("store");
    for mode in [0o4600, 0o1600, 0o2600, 0o10600, 0o400, 0o200, 0o000, 0o044] {
        let err = Store::open(&dir, Options { file_mode: mode, ..buffered(4096) }).err().expect("refused");
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{mode:#o}: {err}");
        assert!(err.message().contains(&format!("{mode:#o}")), "{err} names {mode:#o}");
        assert!(!dir.exists(), "{mode:#o} created the directory");
    }
}

const PROBE_DIR: &str = "LAPILLI_MODE_PROBE";
/// Precedes, in the child's stdout, what its open did.
const ANSWER: &str = "probe answered: ";
const NOBODY: u32 = 65534;

/// The child's side (a no-op when run as an ordinary test): opens the store read-only and says
/// what happened.
#[test]
fn follower_probe_child() {
    let Some(dir) = std::env::var_os(PROBE_DIR) else { return };
    let outcome = match Store::open_read_only(&dir) {
        Ok(store) => format!("opened at head {}", store.head().unwrap()),
        Err(e) => format!("{:?}: {e}", e.kind()),
    };
    println!("{ANSWER}{outcome}");
}

/// Why the child cannot run as `NOBODY` here, if it cannot: it must be able to reach and run
/// this binary, and only root may switch to another user.
fn cannot_probe() -> Option<String> {
    // SAFETY: plain syscall.
    if unsafe { libc::geteuid() } != 0 {
        return Some("the tests do not run as root, so they cannot start a child as another user".into());
    }
    let exe = std::env::current_exe().unwrap();
    if mode_of(&exe) & 0o005 != 0o005 {
        return Some(format!("{} is not readable and executable by other users", exe.display()));
    }
    let mut dir = exe.parent();
    while let Some(d) = dir {
        if mode_of(d) & 0o001 == 0 {
            return Some(format!("{} is not searchable by other users", d.display()));
        }
        dir = d.parent();
    }
    None
}

/// Runs the probe child as `NOBODY` on `dir`; returns what it said its open did.
fn probe_as_nobody(dir: &Path) -> String {
    let out = common::child_test("follower_probe_child")
        .env(PROBE_DIR, dir)
        .uid(NOBODY)
        .gid(NOBODY)
        .stderr(Stdio::inherit())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    match stdout.lines().find_map(|line| line.split_once(ANSWER).map(|(_, answer)| answer)) {
        Some(answer) => answer.to_owned(),
        None => panic!("the probe child did not answer ({}): {stdout}", out.status),
    }
}

/// The probe was refused with `Io`, naming `path` and the permission it lacked.
fn refused_naming(answer: &str, path: &Path) -> bool {
    answer.starts_with("Io: ") && answer.contains(&format!("{}:", path.display())) && answer.contains("ermission denied")
}

/// A store in a directory other users may enter, filled by this (root) process.
fn store_for_probe(root: &Path, name: &str, options: Options) -> PathBuf {
    std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o755)).unwrap();
    let dir = root.join(name);
    let store = Store::open(&dir, options).unwrap();
    for i in 0..5u32 {
        store.append(vec![Event::new("N", [format!("n:{i}")], vec![])], None).unwrap();
    }
    store.close().unwrap();
    dir
}

#[test]
fn a_follower_running_as_another_user_reads_only_what_the_mode_shares() {
    if let Some(reason) = cannot_probe() {
        // Straight to the terminal, past the test harness's capture: a skip must be seen.
        let _ = writeln!(std::io::stderr().lock(), "SKIPPED a_follower_running_as_another_user...: {reason}");
        return;
    }
    let root = tempfile::tempdir().unwrap();
    // The control: shared with everyone, the other user follows it (so a refusal below is the
    // mode's doing, not the child's).
    let shared = store_for_probe(root.path(), "shared", Options { file_mode: 0o644, ..buffered(4096) });
    assert_eq!(std::fs::metadata(&shared).unwrap().uid(), 0);
    assert_eq!(probe_as_nobody(&shared), "opened at head 5");

    let private = store_for_probe(root.path(), "private", buffered(4096));
    let answer = probe_as_nobody(&private);
    assert!(refused_naming(&answer, &private), "{answer}");

    // A directory opened up by hand over files that stayed private: the follower must not take
    // the unreadable segment for one still being created and answer an empty store.
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o755)).unwrap();
    let segment = common::segment_files(&private).pop().unwrap();
    let answer = probe_as_nobody(&private);
    assert!(refused_naming(&answer, &segment), "{answer}");
}
