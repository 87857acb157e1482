//! `lapilli._lapilli`: the native half of the Python package `lapilli`. A thin face over
//! `lapilli-core`: argument conversion, the GIL released around every blocking call
//! (`blocking`), errors mapped in one place (`errors`), Arrow export (`arrow`).

mod arrow;
mod blocking;
mod convert;
mod errors;
mod huge;
mod pending;
mod read;
mod store;
mod subscription;
mod values;
mod wake;

use pyo3::prelude::*;

/// Test knob: sets the byte budget of one Arrow batch (tests lower it to a few MiB); returns the
/// previous budget. Not part of the API.
#[pyfunction]
fn _set_arrow_batch_bytes(bytes: usize) -> PyResult<usize> {
    arrow::set_batch_bytes(bytes)
}

/// Test knob: panics inside the binding at `site`, to prove every panic reaches Python as a
/// `LapilliError`: "attached" (a method body), "detached" (work run with the interpreter
/// released), "arrow" (arms a panic in the next Arrow batch built, inside the C stream
/// callback). Not part of the API.
#[pyfunction]
fn _panic_for_test(py: Python<'_>, site: &str) -> PyResult<()> {
    match site {
        "attached" => errors::guard(|| panic!("test knob: a panic in a method body")),
        "detached" => blocking::detached(py, || -> lapilli_core::Result<()> { panic!("test knob: a panic with the interpreter released") }),
        "arrow" => {
            arrow::panic_in_next_batch();
            Ok(())
        }
        other => Err(errors::invalid(format!("site is {other:?}; it must be \"attached\", \"detached\" or \"arrow\""))),
    }
}

/// Runs the `lapilli` command line with `argv` (the program name first) in this process, with
/// the interpreter released, and returns its exit status. What `python -m lapilli` and the
/// `lapilli` script call (`lapilli/_cli.py`).
#[pyfunction]
fn _cli_main(py: Python<'_>, argv: Vec<std::ffi::OsString>) -> PyResult<i32> {
    blocking::detached(py, move || Ok(lapilli_cli::run(argv)))
}

#[pymodule(gil_used = false)]
fn _lapilli(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<store::Store>()?;
    m.add_class::<values::Event>()?;
    m.add_class::<values::SequencedEvent>()?;
    m.add_class::<values::QueryItem>()?;
    m.add_class::<values::Query>()?;
    m.add_class::<values::AppendCondition>()?;
    m.add_class::<values::AppendResult>()?;
    m.add_class::<read::ReadResult>()?;
    m.add_class::<arrow::ArrowStream>()?;
    m.add_class::<subscription::Subscription>()?;
    m.add_class::<pending::PendingAppend>()?;
    // Set as plain attributes, not `add_function`: that would list them in `__all__`.
    m.as_any().setattr("_set_arrow_batch_bytes", wrap_pyfunction!(_set_arrow_batch_bytes, m)?)?;
    m.as_any().setattr("_panic_for_test", wrap_pyfunction!(_panic_for_test, m)?)?;
    m.as_any().setattr("_cli_main", wrap_pyfunction!(_cli_main, m)?)?;
    errors::classes(py).register(py, m)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
