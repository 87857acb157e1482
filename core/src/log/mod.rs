//! The log: fixed-size segment files of CRC-framed records, a commit marker ending every batch,
//! and the recovery rule that decides which batches are committed.
//!
//! Public so that the crash harness and the fuzz targets can drive the pure recovery function
//! and the header decoder over arbitrary bytes.

pub mod format;
pub(crate) mod prepare;
pub(crate) mod zero_ahead;
pub mod recovery;
pub(crate) mod segment;
