//! `lapilli._lapilli`: the native half of the Python package `lapilli`. A thin face over
//! `lapilli-core`: argument conversion, the GIL released around every blocking call
//! (`blocking`), errors mapped in one place (`errors`), Arrow export (`arrow`).

mod arrow;
mod blocking;
mod convert;
mod errors;
mod pending;
mod read;
mod store;
mod subscription;
mod values;

use pyo3::prelude::*;

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
    errors::classes(py).register(py, m)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
