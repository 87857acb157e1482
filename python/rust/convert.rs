//! Taking arguments from Python: wrong types raise `TypeError` naming the argument, before
//! anything reaches the engine.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyString};

pub fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".into())
}

/// A `str` argument; bytes are refused (text must be given as text).
pub fn string(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<String> {
    match obj.cast::<PyString>() {
        Ok(s) => Ok(s.to_cow()?.into_owned()),
        Err(_) => Err(PyTypeError::new_err(format!("{what} must be str, not {}", type_name(obj)))),
    }
}

/// A list (any iterable but a lone str or bytes) of `str`.
pub fn strings(obj: Option<&Bound<'_, PyAny>>, what: &str) -> PyResult<Vec<String>> {
    let Some(obj) = obj else { return Ok(Vec::new()) };
    if obj.is_none() {
        return Ok(Vec::new());
    }
    if obj.is_instance_of::<PyString>() || obj.is_instance_of::<PyBytes>() {
        return Err(PyTypeError::new_err(format!(
            "{what} must be a list of str, not a single {}",
            type_name(obj)
        )));
    }
    let iter = obj
        .try_iter()
        .map_err(|_| PyTypeError::new_err(format!("{what} must be a list of str, not {}", type_name(obj))))?;
    let mut out = Vec::new();
    for (i, item) in iter.enumerate() {
        out.push(string(&item?, &format!("{what}[{i}]"))?);
    }
    Ok(out)
}

/// Payload bytes: `bytes`, `bytearray` or anything with the buffer protocol of bytes
/// (`memoryview`); a `str` is refused, since its encoding would be a guess.
pub fn data(obj: Option<&Bound<'_, PyAny>>, what: &str) -> PyResult<Vec<u8>> {
    let Some(obj) = obj else { return Ok(Vec::new()) };
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(b.as_bytes().to_vec());
    }
    if let Ok(b) = obj.cast::<PyByteArray>() {
        return Ok(b.to_vec());
    }
    if obj.is_instance_of::<PyString>() {
        return Err(PyTypeError::new_err(format!(
            "{what} must be bytes, not str (encode it, e.g. s.encode())"
        )));
    }
    if obj.hasattr("__buffer__").unwrap_or(false) || type_name(obj) == "memoryview" {
        if let Ok(b) = obj.py().import("builtins")?.getattr("bytes")?.call1((obj,)) {
            return Ok(b.cast::<PyBytes>()?.as_bytes().to_vec());
        }
    }
    Err(PyTypeError::new_err(format!("{what} must be bytes, not {}", type_name(obj))))
}

/// A position: a non-negative int (`bool` refused).
pub fn position(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<u64> {
    if obj.is_instance_of::<pyo3::types::PyBool>() || !obj.is_instance_of::<pyo3::types::PyInt>() {
        return Err(PyTypeError::new_err(format!("{what} must be int, not {}", type_name(obj))));
    }
    obj.extract::<u64>().map_err(|_| {
        crate::errors::invalid(format!("{what} is {obj}; a position is a non-negative 64-bit int"))
    })
}

pub fn optional_position(obj: Option<&Bound<'_, PyAny>>, what: &str) -> PyResult<Option<u64>> {
    match obj {
        None => Ok(None),
        Some(o) if o.is_none() => Ok(None),
        Some(o) => position(o, what).map(Some),
    }
}
