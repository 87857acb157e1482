//! The thread that runs a large group's `fdatasync` while the writer builds the group's tail
//! index (ARCHITECTURE.md, "The index built during the sync"). The next group waits for both.
//!
//! It only syncs: deciding, publishing, answering and poisoning stay on the writer, which hands
//! it one sync at a time and takes its result before it hands another.

use std::fs::File;
use std::io;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub(crate) struct Syncer {
    jobs: Option<Sender<Arc<File>>>,
    done: Receiver<io::Result<Duration>>,
    thread: Option<JoinHandle<()>>,
    /// A sync handed over whose result the writer has not taken yet.
    pending: bool,
}

impl Syncer {
    pub fn start() -> io::Result<Syncer> {
        let (jobs, incoming) = channel::<Arc<File>>();
        let (results, done) = channel();
        let thread = std::thread::Builder::new().name("lapilli-sync".into()).spawn(move || {
            for file in incoming {
                let started = Instant::now();
                let synced = crate::fault::io_point("commit.fsync").and_then(|_| file.sync_data());
                // Not kept past the sync: after a roll-over the old segment's file is closed by
                // the writer's drop of it, not whenever this thread next wakes.
                drop(file);
                if results.send(synced.map(|()| started.elapsed())).is_err() {
                    return;
                }
            }
        })?;
        Ok(Syncer { jobs: Some(jobs), done, thread: Some(thread), pending: false })
    }

    /// Starts syncing `file`'s data (what was written to it before this call, at least).
    pub fn begin(&mut self, file: Arc<File>) {
        assert!(!self.pending, "one sync at a time");
        self.pending = true;
        // A thread that is gone (it ends only when dropped, so it panicked) dropped its end of
        // `done` too: `finish` reports it.
        let _ = self.jobs.as_ref().expect("the sync thread runs until the syncer is dropped").send(file);
    }

    /// The result of the sync begun last (how long it took), once it is done.
    pub fn finish(&mut self) -> io::Result<Duration> {
        assert!(self.pending, "no sync was begun");
        self.pending = false;
        self.done.recv().unwrap_or_else(|_| Err(io::Error::other("the sync thread stopped")))
    }
}

impl Drop for Syncer {
    fn drop(&mut self) {
        self.jobs = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
