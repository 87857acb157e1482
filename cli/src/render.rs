//! How events and times are shown: table lines, JSON objects (the JSON-lines format `export`
//! writes and `import` reads), RFC 3339 times.

use std::io::Write;

use base64::Engine;
use lapilli_core::SequencedEvent;
use serde_json::{Map, Value, json};

use crate::args::{DataFormat, OutputFormat};
use crate::{Failure, Outcome};

/// `recorded_at` (microseconds since the Unix epoch) as RFC 3339 in UTC, to the microsecond.
pub fn timestamp(micros: u64) -> String {
    let secs = micros / 1_000_000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:06}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        micros % 1_000_000
    )
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The data as JSON: the key it goes under and its text.
fn data_field(data: &[u8], format: DataFormat) -> (&'static str, String) {
    match format {
        DataFormat::Auto => match std::str::from_utf8(data) {
            Ok(text) => ("data", text.to_owned()),
            Err(_) => ("data_base64", base64::engine::general_purpose::STANDARD.encode(data)),
        },
        DataFormat::Utf8 | DataFormat::Raw => ("data", String::from_utf8_lossy(data).into_owned()),
        DataFormat::Base64 => ("data_base64", base64::engine::general_purpose::STANDARD.encode(data)),
        DataFormat::Hex => ("data_hex", hex(data)),
    }
}

/// One event as a JSON object: position, recorded_at, type, tags, and the data under `data`
/// (UTF-8 text), `data_base64` or `data_hex`.
pub fn event_json(event: &SequencedEvent, format: DataFormat) -> Value {
    let mut object = Map::new();
    object.insert("position".into(), json!(event.position.get()));
    object.insert("recorded_at".into(), json!(timestamp(event.recorded_at)));
    object.insert("type".into(), json!(event.event_type));
    object.insert("tags".into(), json!(event.tags));
    let (key, text) = data_field(&event.data, format);
    object.insert(key.into(), Value::String(text));
    Value::Object(object)
}

/// Writes events in one of the output formats; `finish` closes a JSON array.
pub struct EventWriter<W: Write> {
    out: W,
    format: OutputFormat,
    data: DataFormat,
    written: u64,
}

impl<W: Write> EventWriter<W> {
    pub fn new(out: W, format: OutputFormat, data: DataFormat) -> Outcome<Self> {
        if data == DataFormat::Raw && format != OutputFormat::Table {
            return Err(Failure::Usage(format!(
                "--data raw writes bytes as they are, which only --format table can; --format is {}",
                match format {
                    OutputFormat::Jsonl => "jsonl",
                    OutputFormat::Json => "json",
                    OutputFormat::Table => "table",
                }
            )));
        }
        Ok(EventWriter { out, format, data, written: 0 })
    }

    pub fn write(&mut self, event: &SequencedEvent) -> Outcome {
        match self.format {
            OutputFormat::Table => {
                if self.written == 0 {
                    writeln!(self.out, "{:>10}  {:<27}  {:<24}  {:<32}  data", "position", "recorded_at", "type", "tags")?;
                }
                write!(
                    self.out,
                    "{:>10}  {:<27}  {:<24}  {:<32}  ",
                    event.position.get(),
                    timestamp(event.recorded_at),
                    event.event_type,
                    event.tags.join(",")
                )?;
                match self.data {
                    DataFormat::Raw => self.out.write_all(&event.data)?,
                    // A table line shows text only if it is printable; anything else would break
                    // the line or the terminal, so it is shown as base64, marked.
                    DataFormat::Auto => match std::str::from_utf8(&event.data) {
                        Ok(text) if !text.chars().any(char::is_control) => self.out.write_all(text.as_bytes())?,
                        _ => write!(self.out, "base64:{}", base64::engine::general_purpose::STANDARD.encode(&event.data))?,
                    },
                    format => self.out.write_all(data_field(&event.data, format).1.as_bytes())?,
                }
                writeln!(self.out)?;
            }
            OutputFormat::Jsonl => {
                serde_json::to_writer(&mut self.out, &event_json(event, self.data)).map_err(std::io::Error::from)?;
                writeln!(self.out)?;
            }
            OutputFormat::Json => {
                self.out.write_all(if self.written == 0 { b"[\n" } else { b",\n" })?;
                serde_json::to_writer(&mut self.out, &event_json(event, self.data)).map_err(std::io::Error::from)?;
            }
        }
        self.written += 1;
        Ok(())
    }

    pub fn flush(&mut self) -> Outcome {
        self.out.flush()?;
        Ok(())
    }

    pub fn finish(mut self) -> Outcome {
        if self.format == OutputFormat::Json {
            self.out.write_all(if self.written == 0 { b"[]\n" } else { b"\n]\n" })?;
        }
        self.out.flush()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::timestamp;

    #[test]
    fn timestamps_are_rfc3339_utc() {
        assert_eq!(timestamp(0), "1970-01-01T00:00:00.000000Z");
        assert_eq!(timestamp(951_782_400_000_001), "2000-02-29T00:00:00.000001Z");
        assert_eq!(timestamp(1_796_131_721_123_456), "2026-12-01T13:28:41.123456Z");
    }
}
