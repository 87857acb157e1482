//! The one place where engine errors, and panics, become Python exceptions (`API.md`, "Errors").
//!
//! The classes are made at import with `type(name, bases, namespace)` because two of them have
//! two bases (`InvalidArgumentError` is also a `ValueError`, `LapilliIOError` an `OSError`),
//! which `create_exception!` cannot express.

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};

use lapilli_core::{Error, ErrorKind};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple, PyType};

/// The exception classes, in the order of `KINDS`, plus the base.
pub struct Classes {
    pub base: Py<PyType>,
    by_kind: Vec<(ErrorKind, Py<PyType>)>,
}

static CLASSES: PyOnceLock<Classes> = PyOnceLock::new();

/// (kind, Python name, extra builtin base, docstring)
const KINDS: [(ErrorKind, &str, Option<&str>, &str); 8] = [
    (ErrorKind::Conflict, "ConflictError", None,
     "An event matching the condition's fail_if_events_match lies after its `after`. `.position` is the first such event."),
    (ErrorKind::AlreadyExists, "AlreadyExistsError", None,
     "An event matching the condition's fail_if_exists lies somewhere in the store. `.position` is the first such event."),
    (ErrorKind::InvalidArgument, "InvalidArgumentError", Some("ValueError"),
     "Bad input (a value out of its bounds, an empty list, `after` beyond the head, ...). Nothing was changed."),
    (ErrorKind::StoreLocked, "StoreLockedError", None,
     "Another handle, in this or another process, holds the store writable."),
    (ErrorKind::Closed, "StoreClosedError", None, "The store (or subscription) is closed."),
    (ErrorKind::ReadOnly, "ReadOnlyError", None,
     "A write on a read-only handle, or read-only handles are not available."),
    (ErrorKind::Corruption, "CorruptionError", None, "Bytes on disk do not validate where they must."),
    (ErrorKind::Io, "LapilliIOError", Some("OSError"), "The operating system reported an I/O failure."),
];

fn make_class<'py>(
    py: Python<'py>,
    name: &str,
    bases: Bound<'py, PyTuple>,
    doc: &str,
    code: Option<&str>,
) -> PyResult<Bound<'py, PyType>> {
    let namespace = PyDict::new(py);
    namespace.set_item("__module__", "lapilli")?;
    namespace.set_item("__doc__", doc)?;
    namespace.set_item("position", py.None())?;
    namespace.set_item("code", code)?;
    let class = py.import("builtins")?.getattr("type")?.call1((name, bases, namespace))?;
    Ok(class.cast_into::<PyType>()?)
}

pub fn classes(py: Python<'_>) -> &Classes {
    CLASSES.get_or_init(py, || {
        let builtins = py.import("builtins").expect("builtins");
        let exception = builtins.getattr("Exception").expect("Exception");
        let base = make_class(
            py,
            "LapilliError",
            PyTuple::new(py, [exception]).expect("tuple"),
            "Base of every error the store raises. `.code` is the stable kind name (\"CONFLICT\", ...); `.position` the conflicting event where known.",
            None,
        )
        .expect("LapilliError");
        let by_kind = KINDS
            .iter()
            .map(|(kind, name, extra, doc)| {
                let mut bases = vec![base.clone().into_any()];
                if let Some(extra) = extra {
                    bases.push(builtins.getattr(*extra).expect("builtin base"));
                }
                let class = make_class(py, name, PyTuple::new(py, bases).expect("tuple"), doc, Some(kind.code()))
                    .expect("error class");
                (*kind, class.unbind())
            })
            .collect();
        Classes { base: base.unbind(), by_kind }
    })
}

impl Classes {
    pub fn for_kind(&self, kind: ErrorKind) -> &Py<PyType> {
        &self.by_kind.iter().find(|(k, _)| *k == kind).expect("every kind has a class").1
    }

    pub fn register(&self, py: Python<'_>, module: &Bound<'_, PyModule>) -> PyResult<()> {
        module.add("LapilliError", self.base.clone_ref(py))?;
        for (kind, class) in &self.by_kind {
            let name = KINDS.iter().find(|(k, ..)| k == kind).unwrap().1;
            module.add(name, class.clone_ref(py))?;
        }
        Ok(())
    }
}

/// The Python exception for an engine error, with `.position` set where the engine knows it.
pub fn to_py(err: Error) -> PyErr {
    Python::attach(|py| {
        let class = classes(py).for_kind(err.kind()).bind(py);
        match class.call1((err.message().to_string(),)) {
            Ok(instance) => {
                if let Some(position) = err.position() {
                    if let Err(e) = instance.setattr("position", position.get()) {
                        return e;
                    }
                }
                PyErr::from_value(instance)
            }
            Err(e) => e,
        }
    })
}

/// What a panic's payload says (`panic!` with a literal or a formatted message), for the
/// exception that replaces it.
pub fn panic_message(payload: &(dyn Any + Send)) -> String {
    let what = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_string());
    format!("internal error in lapilli (a bug; please report it): {what}")
}

/// A Rust panic as a normal Python exception: a `LapilliError` (an `Exception`, so `except
/// Exception` catches it), never pyo3's `PanicException` (a `BaseException`, which escapes such
/// handlers and reads as a crash).
pub fn from_panic(payload: Box<dyn Any + Send>) -> PyErr {
    let message = panic_message(payload.as_ref());
    Python::attach(|py| match classes(py).base.bind(py).call1((message,)) {
        Ok(instance) => PyErr::from_value(instance),
        Err(e) => e,
    })
}

/// Runs a method's body with panics caught at the boundary: every `#[pymethods]` function that
/// runs more than a field read goes through this (or through `blocking::detached`, which does
/// the same for the work it runs with the interpreter released).
pub fn guard<T>(body: impl FnOnce() -> PyResult<T>) -> PyResult<T> {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or_else(|payload| Err(from_panic(payload)))
}

/// An `InvalidArgumentError` raised by the binding itself (values the engine never sees).
pub fn invalid(message: impl Into<String>) -> PyErr {
    to_py(Error::new(ErrorKind::InvalidArgument, message))
}
