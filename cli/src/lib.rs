//! The `lapilli` command line: look into a store (info, vocabulary, reads, tail, export,
//! verify, stats) and load one (import) without writing a program.
//!
//! [`run`] is the whole program, so that the Python and Node packages can expose it as a native
//! function behind their own `lapilli` entry points, and the `lapilli` binary is `main` around
//! it. Every command but `import` opens the store read-only (a follower), so it works on a
//! store a live process is writing and never blocks or changes it.
//!
//! Exit statuses: 0 success, 1 a failed check or operation (a fault found by `verify`, a bad
//! import line, an I/O error), 2 bad usage (unknown option, bad value, no store at DIR, import
//! into a non-empty store without `--append`). Errors are one line on stderr naming the value.

mod args;
mod commands;
mod export;
mod render;

use std::ffi::OsString;
use std::io::Write;

use clap::Parser;

/// Runs the command line with `args` (the program name first) and returns its exit status.
/// Writes to this process's stdout and stderr.
pub fn run(args: impl IntoIterator<Item = impl Into<OsString> + Clone>) -> i32 {
    let cli = match args::Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            use clap::error::ErrorKind;
            return match e.kind() {
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
                    let _ = write!(std::io::stdout(), "{e}");
                    if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand { 2 } else { 0 }
                }
                _ => {
                    // clap explains over several lines; the contract is one line naming the value.
                    let text = e.to_string();
                    let explained = text.split("\n\nUsage:").next().unwrap_or("bad usage");
                    let line = explained.split_whitespace().collect::<Vec<_>>().join(" ");
                    eprintln!("lapilli: {} (see lapilli --help)", line.trim_start_matches("error: "));
                    2
                }
            };
        }
    };
    match commands::run(cli) {
        Ok(status) => status,
        Err(Failure::Usage(message)) => {
            eprintln!("lapilli: {message}");
            2
        }
        Err(Failure::Failed(message)) => {
            eprintln!("lapilli: {message}");
            1
        }
        // The reader went away (`lapilli read ... | head`): not an error of ours.
        Err(Failure::BrokenPipe) => 0,
    }
}

/// Why a command stopped.
#[derive(Debug)]
pub(crate) enum Failure {
    /// Bad usage: exit status 2.
    Usage(String),
    /// A failed check or operation: exit status 1.
    Failed(String),
    BrokenPipe,
}

impl From<lapilli_core::Error> for Failure {
    fn from(e: lapilli_core::Error) -> Self {
        match e.kind() {
            lapilli_core::ErrorKind::InvalidArgument => Failure::Usage(e.message().to_owned()),
            _ => Failure::Failed(e.to_string()),
        }
    }
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Self {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            Failure::BrokenPipe
        } else {
            Failure::Failed(format!("cannot write the output: {e}"))
        }
    }
}

pub(crate) type Outcome<T = ()> = std::result::Result<T, Failure>;
