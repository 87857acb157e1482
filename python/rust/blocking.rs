//! The one way a call that may block or take more than microseconds leaves Python: the GIL is
//! released (other threads run; free-threaded builds do not stop the world for us), engine
//! errors become Python exceptions, a panic becomes a `LapilliError` rather than unwinding into
//! the interpreter, and a Ctrl-C that arrived meanwhile is raised as `KeyboardInterrupt`.

use std::panic::{AssertUnwindSafe, catch_unwind};

use pyo3::prelude::*;
use pyo3::marker::Ungil;

use crate::errors::{from_panic, to_py};

pub fn detached<T, F>(py: Python<'_>, f: F) -> PyResult<T>
where
    F: Ungil + Send + FnOnce() -> lapilli_core::Result<T>,
    T: Send,
{
    let result = py.detach(move || catch_unwind(AssertUnwindSafe(f)));
    py.check_signals()?;
    match result {
        Ok(result) => result.map_err(to_py),
        Err(payload) => Err(from_panic(payload)),
    }
}

/// Locks a binding-side mutex. Only ever called inside `detached` (or with `try_lock` while
/// attached), so a thread waiting for the lock never holds the interpreter, and a holder never
/// attaches while holding it: no deadlock against the GIL.
pub fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}
