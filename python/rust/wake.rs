//! How the store's completion thread hands an answer to asyncio: it attaches to the interpreter
//! only to call `loop.call_soon_threadsafe(callback)`, so the callback (library code of
//! `lapilli.aio`, and whatever task it resumes) runs on the loop's own thread, never on
//! lapilli's.

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

/// A callback to run on an asyncio event loop.
pub struct LoopCallback {
    pub event_loop: Py<PyAny>,
    pub callback: Py<PyAny>,
}

impl LoopCallback {
    /// Schedules the callback on its loop, from any thread (the completion thread; or a Python
    /// thread when the answer was there at once, or the store had already closed).
    pub fn schedule(self) {
        let mut this = Some(self);
        let _ = Python::try_attach(|py| {
            let Some(LoopCallback { event_loop, callback }) = this.take() else { return };
            if let Err(e) = event_loop.call_method1(py, "call_soon_threadsafe", (callback,)) {
                // RuntimeError: the loop was closed meanwhile, and nobody waits on it any more.
                if !e.is_instance_of::<PyRuntimeError>(py) {
                    e.write_unraisable(py, Some(event_loop.bind(py)));
                }
            }
        });
        // Not attached: the interpreter is finalizing and no loop runs. Dropping Python
        // references without it is not allowed; leaking two objects at exit is harmless.
        std::mem::forget(this);
    }
}
