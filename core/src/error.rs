//! One error type for the whole engine, with a stable [`ErrorKind`].
//!
//! Every binding maps `ErrorKind` to its runtime's exception classes in exactly one place, so
//! the kinds here are the contract (`API.md`, "Errors"); messages are for people and always name
//! the offending value.

use std::fmt;
use std::io;

use crate::position::Position;

/// The cause of an [`Error`], the same set in every runtime.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The boundary clause of an append condition matched an event after `after`.
    Conflict,
    /// The existence clause of an append condition matched an event somewhere in the store.
    AlreadyExists,
    /// Bad input: nothing was changed.
    InvalidArgument,
    /// Another handle (in this or another process) holds the store writable.
    StoreLocked,
    /// The store or subscription was closed.
    Closed,
    /// An append on a read-only handle.
    ReadOnly,
    /// Bytes on disk do not validate where they must.
    Corruption,
    /// The operating system reported an I/O failure.
    Io,
}

impl ErrorKind {
    /// The stable upper-snake name used by the Node.js binding's `err.code` and the test
    /// scenarios (`"CONFLICT"`, `"INVALID_ARGUMENT"`, ...).
    pub fn code(self) -> &'static str {
        match self {
            ErrorKind::Conflict => "CONFLICT",
            ErrorKind::AlreadyExists => "ALREADY_EXISTS",
            ErrorKind::InvalidArgument => "INVALID_ARGUMENT",
            ErrorKind::StoreLocked => "STORE_LOCKED",
            ErrorKind::Closed => "CLOSED",
            ErrorKind::ReadOnly => "READ_ONLY",
            ErrorKind::Corruption => "CORRUPTION",
            ErrorKind::Io => "IO",
        }
    }
}

/// An engine error: a kind, a message naming the value at fault, and for `Conflict` and
/// `AlreadyExists` the position of the first conflicting event.
///
/// Cloneable because one I/O failure answers every request of a group commit.
#[derive(Clone, Debug)]
pub struct Error {
    kind: ErrorKind,
    message: String,
    position: Option<Position>,
    io_kind: Option<io::ErrorKind>,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error { kind, message: message.into(), position: None, io_kind: None }
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::InvalidArgument, message)
    }

    pub(crate) fn corruption(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::Corruption, message)
    }

    pub(crate) fn closed() -> Self {
        Error::new(ErrorKind::Closed, "the store is closed")
    }

    pub(crate) fn io(context: impl fmt::Display, err: &io::Error) -> Self {
        Error {
            kind: ErrorKind::Io,
            message: format!("{context}: {err}"),
            position: None,
            io_kind: Some(err.kind()),
        }
    }

    /// An `Io` error whose message is already complete (a driver's error, described by the
    /// caller).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn io_message(message: impl Into<String>, io_kind: io::ErrorKind) -> Self {
        Error { kind: ErrorKind::Io, message: message.into(), position: None, io_kind: Some(io_kind) }
    }

    pub(crate) fn at(mut self, position: Position) -> Self {
        self.position = Some(position);
        self
    }

    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    pub fn message(&self) -> &str {
        &self.message
    }

    /// The first conflicting event, for `Conflict` and `AlreadyExists`.
    pub fn position(&self) -> Option<Position> {
        self.position
    }

    /// The operating system's error kind, for `Io`.
    pub fn io_kind(&self) -> Option<io::ErrorKind> {
        self.io_kind
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

/// Tells the user on stderr about something the store carries on without (an index it could not
/// write, a damaged index answered from its log). Never panics, unlike `eprintln!`: a stderr
/// that cannot be written (a closed pipe: EPIPE) must cost the message, not the thread that
/// reports (the sealer, whose death left the writer waiting for it forever; third review).
pub(crate) fn report(message: fmt::Arguments<'_>) {
    use std::io::Write;
    let _ = writeln!(io::stderr(), "{message}");
}
