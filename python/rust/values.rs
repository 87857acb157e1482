//! Value classes: `Event`, `SequencedEvent`, `QueryItem`, `Query`, `AppendCondition`,
//! `AppendResult`. Frozen (immutable, shareable between threads), keyword constructors,
//! readable `repr`, equality and hashing.

use lapilli_core as core;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyList, PyString, PyTuple, PyType};

use crate::convert::{self, type_name};
use crate::errors::to_py;

fn bytes_repr(py: Python<'_>, data: &[u8]) -> String {
    const SHOWN: usize = 64;
    let shown = PyBytes::new(py, &data[..data.len().min(SHOWN)]);
    let text = shown.repr().map(|r| r.to_string()).unwrap_or_default();
    if data.len() > SHOWN { format!("{text}... ({} bytes)", data.len()) } else { text }
}

fn str_repr(py: Python<'_>, s: &str) -> String {
    PyString::new(py, s).repr().map(|r| r.to_string()).unwrap_or_default()
}

fn list_repr(py: Python<'_>, items: &[String]) -> String {
    PyList::new(py, items).and_then(|l| l.repr().map(|r| r.to_string())).unwrap_or_default()
}

/// An event to append: a type, tags (order given does not matter) and data bytes.
#[pyclass(frozen, eq, hash, module = "lapilli")]
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Event {
    pub inner: core::Event,
}

#[pymethods]
impl Event {
    #[new]
    #[pyo3(signature = (r#type, tags=None, data=None))]
    fn new(
        r#type: &Bound<'_, PyAny>,
        tags: Option<&Bound<'_, PyAny>>,
        data: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        Ok(Event {
            inner: core::Event {
                event_type: convert::string(r#type, "type")?,
                tags: convert::strings(tags, "tags")?,
                data: convert::data(data, "data")?,
            },
        })
    }

    #[getter]
    fn r#type(&self) -> &str {
        &self.inner.event_type
    }

    #[getter]
    fn tags(&self) -> Vec<String> {
        self.inner.tags.clone()
    }

    #[getter]
    fn data<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.inner.data)
    }

    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<(Bound<'py, PyType>, (String, Vec<String>, Bound<'py, PyBytes>))> {
        let py = slf.py();
        let me = slf.get();
        Ok((slf.get_type(), (me.inner.event_type.clone(), me.inner.tags.clone(), PyBytes::new(py, &me.inner.data))))
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        format!(
            "Event(type={}, tags={}, data={})",
            str_repr(py, &self.inner.event_type),
            list_repr(py, &self.inner.tags),
            bytes_repr(py, &self.inner.data)
        )
    }
}

/// An event as stored, as reads and subscriptions return it. Tags are sorted.
#[pyclass(frozen, eq, hash, module = "lapilli")]
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct SequencedEvent {
    pub inner: core::SequencedEvent,
}

static EPOCH: PyOnceLock<(Py<PyAny>, Py<PyAny>)> = PyOnceLock::new();

/// `recorded_at` (microseconds since the epoch) as an aware UTC `datetime`, computed exactly
/// (epoch + timedelta) rather than through floating point.
pub fn utc_datetime(py: Python<'_>, micros: u64) -> PyResult<Bound<'_, PyAny>> {
    let (epoch, timedelta) = match EPOCH.get(py) {
        Some(v) => v,
        None => {
            let datetime = py.import("datetime")?;
            let utc = datetime.getattr("timezone")?.getattr("utc")?;
            let epoch = datetime.getattr("datetime")?.call1((1970, 1, 1, 0, 0, 0, 0, utc))?;
            let timedelta = datetime.getattr("timedelta")?;
            let _ = EPOCH.set(py, (epoch.unbind(), timedelta.unbind()));
            EPOCH.get(py).expect("just set")
        }
    };
    let kwargs = pyo3::types::PyDict::new(py);
    kwargs.set_item("microseconds", micros)?;
    let delta = timedelta.bind(py).call((), Some(&kwargs))?;
    epoch.bind(py).add(delta)
}

#[pymethods]
impl SequencedEvent {
    #[new]
    #[pyo3(signature = (position, r#type, tags=None, data=None, recorded_at_us=0))]
    fn new(
        position: &Bound<'_, PyAny>,
        r#type: &Bound<'_, PyAny>,
        tags: Option<&Bound<'_, PyAny>>,
        data: Option<&Bound<'_, PyAny>>,
        recorded_at_us: u64,
    ) -> PyResult<Self> {
        let mut tags = convert::strings(tags, "tags")?;
        tags.sort_unstable_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
        Ok(SequencedEvent {
            inner: core::SequencedEvent {
                position: core::Position(convert::position(position, "position")?),
                recorded_at: recorded_at_us,
                event_type: convert::string(r#type, "type")?,
                tags,
                data: convert::data(data, "data")?,
            },
        })
    }

    #[getter]
    fn position(&self) -> u64 {
        self.inner.position.get()
    }

    #[getter]
    fn r#type(&self) -> &str {
        &self.inner.event_type
    }

    #[getter]
    fn tags(&self) -> Vec<String> {
        self.inner.tags.clone()
    }

    #[getter]
    fn data<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.inner.data)
    }

    /// The commit time of the event's batch, an aware `datetime` in UTC.
    #[getter]
    fn recorded_at<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        utc_datetime(py, self.inner.recorded_at)
    }

    /// The commit time in microseconds since the Unix epoch.
    #[getter]
    fn recorded_at_us(&self) -> u64 {
        self.inner.recorded_at
    }

    /// The plain `Event` (type, tags, data) without position and time.
    fn to_event(&self) -> Event {
        Event {
            inner: core::Event {
                event_type: self.inner.event_type.clone(),
                tags: self.inner.tags.clone(),
                data: self.inner.data.clone(),
            },
        }
    }

    #[allow(clippy::type_complexity)]
    fn __reduce__<'py>(
        slf: &Bound<'py, Self>,
    ) -> PyResult<(Bound<'py, PyType>, (u64, String, Vec<String>, Bound<'py, PyBytes>, u64))> {
        let py = slf.py();
        let e = &slf.get().inner;
        Ok((
            slf.get_type(),
            (e.position.get(), e.event_type.clone(), e.tags.clone(), PyBytes::new(py, &e.data), e.recorded_at),
        ))
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        format!(
            "SequencedEvent(position={}, type={}, tags={}, data={}, recorded_at_us={})",
            self.inner.position,
            str_repr(py, &self.inner.event_type),
            list_repr(py, &self.inner.tags),
            bytes_repr(py, &self.inner.data),
            self.inner.recorded_at
        )
    }
}

/// One alternative of a query: the event's type is one of `types` (or `types` is empty) and
/// every tag of `tags` is among the event's tags.
#[pyclass(frozen, eq, hash, module = "lapilli")]
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct QueryItem {
    pub inner: core::QueryItem,
}

#[pymethods]
impl QueryItem {
    #[new]
    #[pyo3(signature = (types=None, tags=None))]
    fn new(types: Option<&Bound<'_, PyAny>>, tags: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        Ok(QueryItem {
            inner: core::QueryItem {
                types: convert::strings(types, "types")?,
                tags: convert::strings(tags, "tags")?,
            },
        })
    }

    #[getter]
    fn types(&self) -> Vec<String> {
        self.inner.types.clone()
    }

    #[getter]
    fn tags(&self) -> Vec<String> {
        self.inner.tags.clone()
    }

    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> (Bound<'py, PyType>, (Vec<String>, Vec<String>)) {
        let item = &slf.get().inner;
        (slf.get_type(), (item.types.clone(), item.tags.clone()))
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        format!("QueryItem(types={}, tags={})", list_repr(py, &self.inner.types), list_repr(py, &self.inner.tags))
    }
}

/// What a read, subscription or condition selects: `Query.all()`, or any of some items.
/// Checked when built: an empty item list, an item with neither types nor tags, or an empty or
/// oversized string raises `InvalidArgumentError`.
#[pyclass(frozen, eq, hash, module = "lapilli")]
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Query {
    pub inner: core::Query,
}

impl Query {
    fn checked(inner: core::Query) -> PyResult<Self> {
        inner.validate("query").map_err(to_py)?;
        Ok(Query { inner })
    }
}

fn item_list(items: &Bound<'_, PyAny>) -> PyResult<Vec<core::QueryItem>> {
    if items.is_instance_of::<PyString>() {
        return Err(PyTypeError::new_err("items must be a list of QueryItem, not str"));
    }
    let iter = items
        .try_iter()
        .map_err(|_| PyTypeError::new_err(format!("items must be a list of QueryItem, not {}", type_name(items))))?;
    let mut out = Vec::new();
    for (i, item) in iter.enumerate() {
        let item = item?;
        let item = item.cast::<QueryItem>().map_err(|_| {
            PyTypeError::new_err(format!("items[{i}] must be QueryItem, not {}", type_name(&item)))
        })?;
        out.push(item.get().inner.clone());
    }
    Ok(out)
}

#[pymethods]
impl Query {
    /// Matches every event.
    #[staticmethod]
    fn all() -> Self {
        Query { inner: core::Query::All }
    }

    /// Matches an event when any of `items` does.
    #[staticmethod]
    fn of(items: &Bound<'_, PyAny>) -> PyResult<Self> {
        Query::checked(core::Query::Items(item_list(items)?))
    }

    /// One item with these tags (all required) and any type.
    #[staticmethod]
    #[pyo3(signature = (*tags))]
    fn for_tags(tags: &Bound<'_, PyTuple>) -> PyResult<Self> {
        Query::checked(core::Query::for_tags(convert::strings(Some(tags.as_any()), "tags")?))
    }

    /// One item with these types (any of them) and no tags.
    #[staticmethod]
    #[pyo3(signature = (*types))]
    fn for_types(types: &Bound<'_, PyTuple>) -> PyResult<Self> {
        Query::checked(core::Query::for_types(convert::strings(Some(types.as_any()), "types")?))
    }

    /// The items; empty for `Query.all()`.
    #[getter]
    fn items(&self) -> Vec<QueryItem> {
        match &self.inner {
            core::Query::All => Vec::new(),
            core::Query::Items(items) => items.iter().map(|i| QueryItem { inner: i.clone() }).collect(),
        }
    }

    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyTuple>)> {
        let py = slf.py();
        let class = slf.get_type();
        match &slf.get().inner {
            core::Query::All => Ok((class.getattr("all")?, PyTuple::empty(py))),
            core::Query::Items(items) => {
                let items: Vec<QueryItem> = items.iter().map(|i| QueryItem { inner: i.clone() }).collect();
                Ok((class.getattr("of")?, PyTuple::new(py, [PyList::new(py, items)?])?))
            }
        }
    }

    #[getter]
    fn is_all(&self) -> bool {
        matches!(self.inner, core::Query::All)
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        match &self.inner {
            core::Query::All => "Query.all()".into(),
            core::Query::Items(items) => {
                let parts: Vec<String> =
                    items.iter().map(|i| QueryItem { inner: i.clone() }.__repr__(py)).collect();
                format!("Query.of([{}])", parts.join(", "))
            }
        }
    }
}

pub fn query_arg(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<core::Query> {
    match obj.cast::<Query>() {
        Ok(q) => Ok(q.get().inner.clone()),
        Err(_) => Err(PyTypeError::new_err(format!("{what} must be Query, not {}", type_name(obj)))),
    }
}

/// Guards an append: fail with `ConflictError` if an event matching `fail_if_events_match` lies
/// after `after` (None: anywhere), and with `AlreadyExistsError` if an event matching
/// `fail_if_exists` lies anywhere.
#[pyclass(frozen, eq, module = "lapilli")]
#[derive(Clone, PartialEq)]
pub struct AppendCondition {
    pub inner: core::AppendCondition,
}

#[pymethods]
impl AppendCondition {
    #[new]
    #[pyo3(signature = (fail_if_events_match, after=None, fail_if_exists=None))]
    fn new(
        fail_if_events_match: &Bound<'_, PyAny>,
        after: Option<&Bound<'_, PyAny>>,
        fail_if_exists: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let fail_if_events_match = query_arg(fail_if_events_match, "fail_if_events_match")?;
        let after = convert::optional_position(after, "after")?.map(core::Position);
        let fail_if_exists = match fail_if_exists {
            Some(q) if !q.is_none() => Some(query_arg(q, "fail_if_exists")?),
            _ => None,
        };
        Ok(AppendCondition { inner: core::AppendCondition { fail_if_events_match, after, fail_if_exists } })
    }

    #[getter]
    fn fail_if_events_match(&self) -> Query {
        Query { inner: self.inner.fail_if_events_match.clone() }
    }

    #[getter]
    fn after(&self) -> Option<u64> {
        self.inner.after.map(|p| p.get())
    }

    #[getter]
    fn fail_if_exists(&self) -> Option<Query> {
        self.inner.fail_if_exists.clone().map(|inner| Query { inner })
    }

    #[allow(clippy::type_complexity)]
    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> (Bound<'py, PyType>, (Query, Option<u64>, Option<Query>)) {
        let c = &slf.get().inner;
        (
            slf.get_type(),
            (
                Query { inner: c.fail_if_events_match.clone() },
                c.after.map(|p| p.get()),
                c.fail_if_exists.clone().map(|inner| Query { inner }),
            ),
        )
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        let after = self.inner.after.map_or("None".to_string(), |p| p.to_string());
        let exists = self
            .inner
            .fail_if_exists
            .clone()
            .map_or("None".to_string(), |inner| Query { inner }.__repr__(py));
        format!(
            "AppendCondition(fail_if_events_match={}, after={after}, fail_if_exists={exists})",
            Query { inner: self.inner.fail_if_events_match.clone() }.__repr__(py)
        )
    }
}

/// The positions an append was given; `last` is the head right after it.
#[pyclass(frozen, eq, hash, module = "lapilli")]
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct AppendResult {
    #[pyo3(get)]
    pub first: u64,
    #[pyo3(get)]
    pub last: u64,
}

#[pymethods]
impl AppendResult {
    #[new]
    fn new(first: u64, last: u64) -> Self {
        AppendResult { first, last }
    }

    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> (Bound<'py, PyType>, (u64, u64)) {
        let r = slf.get();
        (slf.get_type(), (r.first, r.last))
    }

    fn __repr__(&self) -> String {
        format!("AppendResult(first={}, last={})", self.first, self.last)
    }
}

impl From<core::AppendResult> for AppendResult {
    fn from(r: core::AppendResult) -> Self {
        AppendResult { first: r.first.get(), last: r.last.get() }
    }
}
