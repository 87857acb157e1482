//! The command line's grammar (clap), with an example in every command's help.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Parser, Debug)]
#[command(
    name = "lapilli",
    version,
    about = "Look into a Lapilli event store: info, types, tags, read, tail, export, import, verify, stats",
    after_help = "Every command but import opens the store read-only and works while another process writes it.\n\
                  Exit status: 0 ok, 1 a failed check or operation, 2 bad usage.\n\n\
                  Example:\n  lapilli info ./events\n  lapilli read ./events --tag course:c1 --format jsonl"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Head, event count, first and last recorded_at, segments, indexes, bytes on disk, format
    /// versions, and the writer's pid if one holds the store.
    #[command(after_help = "Example:\n  lapilli info ./events --json")]
    Info {
        dir: PathBuf,
        /// One JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Every event type with how many events have it (from the indexes, not a scan).
    #[command(after_help = "Example:\n  lapilli types ./events")]
    Types {
        dir: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Every tag (or those starting with --prefix) with how many events carry it (from the
    /// indexes, not a scan).
    #[command(after_help = "Example:\n  lapilli tags ./events --prefix course:")]
    Tags {
        dir: PathBuf,
        /// Only tags starting with this.
        #[arg(long, default_value = "")]
        prefix: String,
        #[arg(long)]
        json: bool,
    },
    /// The events matching a query, in a window of positions.
    #[command(after_help = "Example:\n  lapilli read ./events --type CourseDefined --tag course:c1 --after 100 --limit 10 --format jsonl")]
    Read {
        dir: PathBuf,
        #[command(flatten)]
        query: QueryArgs,
        #[command(flatten)]
        window: WindowArgs,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// The last events matching a query; with -f, then every new commit until Ctrl-C.
    #[command(after_help = "Example:\n  lapilli tail ./events --tag course:c1 -n 5 -f")]
    Tail {
        dir: PathBuf,
        #[command(flatten)]
        query: QueryArgs,
        /// How many of the last events to show first.
        #[arg(short = 'n', long = "lines", value_name = "N", default_value_t = 10)]
        lines: u64,
        /// Keep following new commits until interrupted.
        #[arg(short = 'f', long)]
        follow: bool,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Writes the events matching a query to a file: JSON lines (what import reads), Parquet
    /// or an Arrow IPC file, one column per field.
    #[command(after_help = "Example:\n  lapilli export ./events --format parquet events.parquet --tag course:c1")]
    Export {
        dir: PathBuf,
        #[arg(long, value_enum)]
        format: ExportFormat,
        /// The file to write (replaced if it exists).
        out: PathBuf,
        #[command(flatten)]
        query: QueryArgs,
        #[command(flatten)]
        window: WindowArgs,
    },
    /// Appends the events of a JSON-lines file (the format export writes) in batches. Every
    /// line is checked before anything is appended.
    #[command(after_help = "Example:\n  lapilli import ./events events.jsonl --batch 500\n\n\
        Each line: {\"type\": \"T\", \"tags\": [\"k:v\"], \"data\": \"text\"} (or \"data_base64\" / \"data_hex\");\n\
        position and recorded_at are ignored: the store assigns new ones.")]
    Import {
        dir: PathBuf,
        /// The JSON-lines file.
        input: PathBuf,
        /// Events per append (each append is atomic).
        #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
        batch: u64,
        /// Append to a store that already holds events.
        #[arg(long)]
        append: bool,
        /// Check every line and report the first bad one; append nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Re-checks every record's chained CRC, every commit marker, and that each index file
    /// answers like a scan of its segment. Exit 0 when intact, 1 with the first fault.
    #[command(after_help = "Example:\n  lapilli verify ./events")]
    Verify {
        dir: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// The store's statistics as a read-only handle sees them: head, segments, index bytes,
    /// and how far it lags the writer. (Write counters are per process: ask the writer's
    /// store.stats() for those.)
    #[command(after_help = "Example:\n  lapilli stats ./events --json")]
    Stats {
        dir: PathBuf,
        #[arg(long)]
        json: bool,
    },
}

/// A query of one item: any of the types, all of the tags (`API.md`); none of either reads
/// every event.
#[derive(Args, Debug, Clone)]
pub struct QueryArgs {
    /// Event type to match (repeat for any of several).
    #[arg(long = "type", value_name = "T")]
    pub types: Vec<String>,
    /// Tag every matching event carries (repeat: all of them).
    #[arg(long = "tag", value_name = "K")]
    pub tags: Vec<String>,
}

#[derive(Args, Debug, Clone)]
pub struct WindowArgs {
    /// Only events after this position.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub after: u64,
    /// Only events up to this position (inclusive).
    #[arg(long, value_name = "N")]
    pub until: Option<u64>,
    /// At most this many events.
    #[arg(long, value_name = "N")]
    pub limit: Option<u64>,
    /// Newest first.
    #[arg(long)]
    pub backwards: bool,
}

#[derive(Args, Debug, Clone)]
pub struct OutputArgs {
    #[arg(long, value_enum, default_value_t = OutputFormat::Table)]
    pub format: OutputFormat,
    /// How to show data: auto is UTF-8 where it is, base64 otherwise.
    #[arg(long, value_enum, default_value_t = DataFormat::Auto)]
    pub data: DataFormat,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputFormat {
    Table,
    Jsonl,
    Json,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataFormat {
    Auto,
    /// The bytes as they are (table format only).
    Raw,
    /// UTF-8, with invalid sequences replaced.
    Utf8,
    Base64,
    Hex,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExportFormat {
    Jsonl,
    Parquet,
    Arrow,
}
