//! The writer thread's time slice (`writer/slice.rs`): it asks for a long one while its groups
//! are small and for the default while they are large, and keeps the nice value it inherited.
#![cfg(target_os = "linux")]

use lapilli_core::{Event, Options, Store};

const LONG_SLICE_NANOS: u64 = 10_000_000;

/// The tests of this file look for the one writer thread of the process and set the
/// environment: one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn try_attr_of(tid: libc::pid_t) -> Option<libc::sched_attr> {
    let size = std::mem::size_of::<libc::sched_attr>() as u32;
    // SAFETY: plain integers; the kernel writes at most `size` bytes.
    let mut attr: libc::sched_attr = unsafe { std::mem::zeroed() };
    let got = unsafe { libc::syscall(libc::SYS_sched_getattr, tid, &mut attr as *mut libc::sched_attr, size, 0) };
    (got == 0).then_some(attr)
}

fn attr_of(tid: libc::pid_t) -> libc::sched_attr {
    try_attr_of(tid).unwrap_or_else(|| panic!("sched_getattr of thread {tid}: {}", std::io::Error::last_os_error()))
}

/// Whether this kernel keeps a slice asked for (EEVDF's custom slices, Linux 6.12 and later):
/// asked on a thread of its own, which then ends.
fn kernel_keeps_slices() -> bool {
    std::thread::spawn(|| {
        let Some(mut attr) = try_attr_of(0) else { return false };
        attr.size = std::mem::size_of::<libc::sched_attr>() as u32;
        attr.sched_flags = 0;
        attr.sched_runtime = LONG_SLICE_NANOS;
        // SAFETY: a valid attr for the calling thread.
        let set = unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const libc::sched_attr, 0) };
        set == 0 && attr_of(0).sched_runtime == LONG_SLICE_NANOS
    })
    .join()
    .unwrap()
}

/// The one writer thread of this process (this file's tests open one store at a time).
fn writer_tid() -> libc::pid_t {
    let writers: Vec<libc::pid_t> = std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|task| {
            let task = task.ok()?;
            let name = std::fs::read_to_string(task.path().join("comm")).ok()?;
            (name.trim() == "lapilli-writer").then(|| task.file_name().to_str()?.parse().ok()).flatten()
        })
        .collect();
    assert_eq!(writers.len(), 1, "writer threads: {writers:?}");
    writers[0]
}

#[test]
fn the_writer_asks_for_a_long_slice_while_its_groups_are_small_and_keeps_its_nice_value() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !kernel_keeps_slices() {
        eprintln!("skipped: this kernel does not keep a thread's slice request");
        return;
    }
    std::thread::spawn(|| {
        // A niced thread opens the store (raising one's own nice value needs no privilege):
        // the writer inherits nice 3 and must keep it when it asks for a slice.
        // SAFETY: plain syscalls on the calling thread.
        let tid = unsafe { libc::syscall(libc::SYS_gettid) } as libc::id_t;
        assert_eq!(unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, 3) }, 0);
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), Options::default()).unwrap();
        let small = |i: u32| vec![Event::new("Small", [format!("s:{i}")], vec![1u8; 100])];
        store.append(small(0), None).unwrap();
        let writer = writer_tid();
        let attr = attr_of(writer);
        assert_eq!(attr.sched_runtime, LONG_SLICE_NANOS, "small groups");
        assert_eq!(attr.sched_nice, 3, "the writer's nice value");
        // Groups of 128 KiB: each weighs an eighth, so the average (about 200 bytes after the
        // first group) passes 64 KiB after six of them.
        for i in 0..12 {
            store.append(vec![Event::new("Big", [format!("b:{i}")], vec![2u8; 128 << 10])], None).unwrap();
        }
        let attr = attr_of(writer);
        assert_ne!(attr.sched_runtime, LONG_SLICE_NANOS, "large groups: the default slice");
        assert_eq!(attr.sched_nice, 3);
        // Small groups bring the average (about 100 KiB now) back under 48 KiB, the band's
        // bottom, after six or so.
        for i in 1..40 {
            store.append(small(i), None).unwrap();
        }
        assert_eq!(attr_of(writer).sched_runtime, LONG_SLICE_NANOS, "small groups again");
        assert_eq!(attr_of(writer).sched_nice, 3);
        store.close().unwrap();
    })
    .join()
    .unwrap();
}

/// The writer's slice is left alone with `buffered` durability (its small groups never wait on
/// a sync) and when the environment says `LAPILLI_WRITER_SLICE=default`.
#[test]
fn the_writer_leaves_its_slice_alone_when_buffered_or_told_to() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !kernel_keeps_slices() {
        eprintln!("skipped: this kernel does not keep a thread's slice request");
        return;
    }
    /// Removes the variable however the test ends, so a failure here does not fail the other
    /// test for the wrong reason.
    struct Unset;
    impl Drop for Unset {
        fn drop(&mut self) {
            // SAFETY: as for `set_var` below.
            unsafe { std::env::remove_var("LAPILLI_WRITER_SLICE") };
        }
    }
    for (durability, told) in [(lapilli_core::Durability::Buffered, false), (lapilli_core::Durability::Fsync, true)] {
        let _unset = Unset;
        if told {
            // SAFETY: the tests of this file run one at a time and no other thread reads the
            // environment meanwhile.
            unsafe { std::env::set_var("LAPILLI_WRITER_SLICE", "default") };
        }
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), Options { durability, ..Options::default() }).unwrap();
        for i in 0..4 {
            store.append(vec![Event::new("Small", [format!("s:{i}")], vec![1u8; 100])], None).unwrap();
        }
        let attr = attr_of(writer_tid());
        assert_ne!(attr.sched_runtime, LONG_SLICE_NANOS, "{durability:?}, told: {told}");
        store.close().unwrap();
    }
}
