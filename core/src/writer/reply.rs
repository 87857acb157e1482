//! The one-shot answer to an append: the writer fills it, the caller waits on it (blocking with
//! [`PendingAppend::wait`]), `.await`s it, or registers a callback ([`PendingAppend::on_complete`]).
//! Wakers and callbacks run on the store's completion thread (`completion.rs`), never on the
//! writer; a blocking waiter is woken by the writer directly, once per group for all of the
//! group's blocked callers (`answers.rs`), or on its own where its thread has no bit.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll, Waker};

use crate::completion::{Completions, Job, run_or_defer};
use crate::writer::answers::Bit;
use crate::error::{Error, Result};
use crate::append::AppendResult;

type Callback = Box<dyn FnOnce(Result<AppendResult>) + Send>;

#[derive(Default)]
struct SlotState {
    result: Option<Result<AppendResult>>,
    waker: Option<Waker>,
    /// Set by `on_complete`; takes the result instead of `result`.
    callback: Option<Callback>,
    /// Who is blocked in `wait` on it, and how to wake them.
    sleeper: Sleeper,
}

#[derive(Clone, Copy, Default)]
enum Sleeper {
    #[default]
    None,
    /// On the store's answer word, with this bit (`answers.rs`).
    Bit(Bit),
    /// On the slot's condition variable (no bit was free for its thread, or not on Linux).
    Condvar,
}

struct Slot {
    state: Mutex<SlotState>,
    answered: Condvar,
    /// Where a callback registered after the answer runs.
    completions: Arc<Completions>,
}

/// The writer's end. Dropping it unanswered (a request still queued when the writer stops)
/// answers `Closed`, so no caller waits forever.
pub(crate) struct Reply {
    slot: Option<Arc<Slot>>,
}

impl Reply {
    /// Answers; on the writer thread, a blocked waiter is woken at the writer's next
    /// `flush_deferred`, with the others answered since.
    pub fn send(mut self, result: Result<AppendResult>) {
        if let Some(slot) = self.slot.take() {
            fill(&slot, result);
        }
    }
}

impl Drop for Reply {
    fn drop(&mut self) {
        if let Some(slot) = self.slot.take() {
            fill(&slot, Err(Error::closed()));
        }
    }
}

fn fill(slot: &Slot, result: Result<AppendResult>) {
    let (job, sleeper) = {
        let mut state = slot.state.lock().unwrap_or_else(|p| p.into_inner());
        let job = match state.callback.take() {
            Some(callback) => Some(Job::Run(Box::new(move || callback(result)))),
            None => {
                state.result = Some(result);
                state.waker.take().map(Job::Wake)
            }
        };
        (job, state.sleeper)
    };
    match sleeper {
        // Nobody blocked in `wait` (yet): a later `wait` finds the answer.
        Sleeper::None => {}
        Sleeper::Bit(bit) => {
            let on_the_writer = crate::completion::defers_for(&slot.completions);
            slot.completions.answers.answered(bit, on_the_writer);
        }
        Sleeper::Condvar => slot.answered.notify_all(),
    }
    if let Some(job) = job {
        run_or_defer(job);
    }
}

/// An append that has been handed to the writer. Either block on [`PendingAppend::wait`] or
/// `.await` it. Dropping it does not cancel the append: once submitted, it is committed or
/// refused as a whole whether or not anyone is still listening.
pub struct PendingAppend {
    slot: Arc<Slot>,
}

impl PendingAppend {
    pub(crate) fn new(completions: &Arc<Completions>) -> (PendingAppend, Reply) {
        let slot = Arc::new(Slot {
            state: Mutex::default(),
            answered: Condvar::new(),
            completions: completions.clone(),
        });
        (PendingAppend { slot: slot.clone() }, Reply { slot: Some(slot) })
    }

    pub(crate) fn ready(completions: &Arc<Completions>, result: Result<AppendResult>) -> PendingAppend {
        let (pending, reply) = PendingAppend::new(completions);
        reply.send(result);
        pending
    }

    pub fn wait(self) -> Result<AppendResult> {
        let answers = &self.slot.completions.answers;
        let Some(bit) = crate::writer::answers::this_threads_bit() else {
            let mut state = self.slot.state.lock().unwrap_or_else(|p| p.into_inner());
            loop {
                if let Some(result) = state.result.take() {
                    return result;
                }
                state.sleeper = Sleeper::Condvar;
                state = self.slot.answered.wait(state).unwrap_or_else(|p| p.into_inner());
            }
        };
        loop {
            // Read before looking: a fill after the look moves it, so the sleep below returns.
            let epoch = answers.epoch(bit);
            {
                let mut state = self.slot.state.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(result) = state.result.take() {
                    return result;
                }
                state.sleeper = Sleeper::Bit(bit);
            }
            answers.sleep(bit, epoch);
        }
    }

    /// Calls `callback` with the answer, without blocking anyone: on the store's completion
    /// thread (never the writer, never the calling thread), in the order the writer answered
    /// the appends; an answer known before (bad input, or a commit that won the race) goes the
    /// same way. Only once the store is closed does it run on the calling thread. Keep it short:
    /// later completions of the store wait for it.
    ///
    /// ```
    /// use std::sync::mpsc::channel;
    /// use lapilli_core::{Event, Options, Store};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let store = Store::open(dir.path(), Options::default())?;
    /// let (tx, rx) = channel();
    /// store.submit(vec![Event::new("Opened", ["account:a1"], vec![])], None)
    ///     .on_complete(move |result| tx.send(result).unwrap());
    /// assert_eq!(rx.recv()??.first.get(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn on_complete(self, callback: impl FnOnce(Result<AppendResult>) + Send + 'static) {
        let mut state = self.slot.state.lock().unwrap_or_else(|p| p.into_inner());
        match state.result.take() {
            Some(result) => {
                drop(state);
                self.slot.completions.dispatch(vec![Job::Run(Box::new(move || callback(result)))]);
            }
            None => state.callback = Some(Box::new(callback)),
        }
    }
}

impl Future for PendingAppend {
    type Output = Result<AppendResult>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut state = self.slot.state.lock().unwrap_or_else(|p| p.into_inner());
        match state.result.take() {
            Some(result) => Poll::Ready(result),
            None => {
                state.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}
