//! The one-shot answer to an append: the writer fills it, the caller waits on it (blocking with
//! [`PendingAppend::wait`], or as a `Future` from an async runtime).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll, Waker};

use crate::error::{Error, Result};
use crate::append::AppendResult;

#[derive(Default)]
struct SlotState {
    result: Option<Result<AppendResult>>,
    waker: Option<Waker>,
}

#[derive(Default)]
struct Slot {
    state: Mutex<SlotState>,
    answered: Condvar,
}

/// The writer's end. Dropping it unanswered (a request still queued when the writer stops)
/// answers `Closed`, so no caller waits forever.
pub(crate) struct Reply {
    slot: Option<Arc<Slot>>,
}

impl Reply {
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
    let waker = {
        let mut state = slot.state.lock().unwrap_or_else(|p| p.into_inner());
        state.result = Some(result);
        state.waker.take()
    };
    slot.answered.notify_all();
    if let Some(waker) = waker {
        waker.wake();
    }
}

/// An append that has been handed to the writer. Either block on [`PendingAppend::wait`] or
/// `.await` it. Dropping it does not cancel the append: once submitted, it is committed or
/// refused as a whole whether or not anyone is still listening.
pub struct PendingAppend {
    slot: Arc<Slot>,
}

impl PendingAppend {
    pub(crate) fn new() -> (PendingAppend, Reply) {
        let slot = Arc::new(Slot::default());
        (PendingAppend { slot: slot.clone() }, Reply { slot: Some(slot) })
    }

    pub(crate) fn ready(result: Result<AppendResult>) -> PendingAppend {
        let (pending, reply) = PendingAppend::new();
        reply.send(result);
        pending
    }

    pub fn wait(self) -> Result<AppendResult> {
        let mut state = self.slot.state.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(result) = state.result.take() {
                return result;
            }
            state = self.slot.answered.wait(state).unwrap_or_else(|p| p.into_inner());
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
