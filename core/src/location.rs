//! Where a store lives: what the string given to `Store::open` names (`API.md`, "Where a store
//! lives"). One parser for every face, so that a URL means the same in all four runtimes.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// What a location given to [`crate::Store::open`] names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Location {
    /// A directory holding an embedded store (a plain path, or a `file:` URL).
    Embedded(PathBuf),
    /// A context in a PostgreSQL database: the `postgresql://` or `postgres://` URL as given.
    Postgres(String),
}

impl Location {
    /// Reads `location`: a string with a URL scheme (two or more characters of a scheme before
    /// `://`, or `file:`) is never taken for a path. `postgresql://` and `postgres://` name a
    /// Postgres store, `file:` URLs and plain paths an embedded one, any other scheme is
    /// `InvalidArgument` naming it.
    ///
    /// ```
    /// use std::path::PathBuf;
    /// use lapilli_core::Location;
    ///
    /// assert_eq!(Location::parse("data/courses")?, Location::Embedded(PathBuf::from("data/courses")));
    /// assert_eq!(Location::parse("file:///var/lib/courses")?, Location::Embedded(PathBuf::from("/var/lib/courses")));
    /// assert!(matches!(Location::parse("postgresql://app@db/events?context=courses")?, Location::Postgres(_)));
    /// assert!(Location::parse("mysql://db/events").is_err());
    /// # Ok::<(), lapilli_core::Error>(())
    /// ```
    pub fn parse(location: impl AsRef<Path>) -> Result<Location> {
        let path = location.as_ref();
        // A path that is not UTF-8 has no scheme we could recognise: it is a path.
        let Some(text) = path.to_str() else { return Ok(Location::Embedded(path.to_path_buf())) };
        if let Some(rest) = strip_scheme(text, "file:") {
            return file_url_path(text, rest).map(Location::Embedded);
        }
        match url_scheme(text) {
            // `postgresql:/host/db` or `postgres:db` is a Postgres URL missing its `//`, not a
            // directory called `postgresql:` (the text is not repeated: it may hold a password).
            None if ["postgresql:", "postgres:"].iter().any(|scheme| strip_scheme(text, scheme).is_some()) => {
                let scheme = &text[..text.find(':').expect("starts with a scheme")];
                Err(Error::invalid(format!(
                    "location starts with the scheme {scheme:?} but not {scheme}://; a Postgres store is opened \
                     by postgresql://user@host/database?context=NAME, and a directory of that name by ./{scheme}:..."
                )))
            }
            None => Ok(Location::Embedded(path.to_path_buf())),
            Some(scheme) if scheme.eq_ignore_ascii_case("postgresql") || scheme.eq_ignore_ascii_case("postgres") => {
                // Schemes are case-insensitive (RFC 3986), the driver's parser is not: it is
                // given the scheme in lower case.
                Ok(Location::Postgres(format!("{}{}", scheme.to_ascii_lowercase(), &text[scheme.len()..])))
            }
            // Named by its scheme only: the rest of a URL may hold a password.
            Some(scheme) => Err(Error::invalid(format!(
                "location has the URL scheme {scheme:?}; a store opens a path, a file: URL or a \
                 postgresql:// URL"
            ))),
        }
    }
}

/// The scheme of `text` if it starts like a URL: `scheme://`, where the scheme is two or more
/// characters (a letter, then letters, digits, `+`, `-` or `.`). One letter before `:` is left
/// to be a path (a drive letter elsewhere; harmless here).
fn url_scheme(text: &str) -> Option<&str> {
    let (scheme, _) = text.split_once("://")?;
    let mut chars = scheme.chars();
    let first = chars.next()?;
    let valid = scheme.len() >= 2
        && first.is_ascii_alphabetic()
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    valid.then_some(scheme)
}

fn strip_scheme<'a>(text: &'a str, scheme: &str) -> Option<&'a str> {
    let head = text.get(..scheme.len())?;
    head.eq_ignore_ascii_case(scheme).then(|| &text[scheme.len()..])
}

/// The path of a `file:` URL: `file:///abs`, `file://localhost/abs`, `file:/abs` or
/// `file:relative`, percent-decoded. Another host is refused: it is not this machine's.
fn file_url_path(url: &str, rest: &str) -> Result<PathBuf> {
    let path = match rest.strip_prefix("//") {
        Some(authority_and_path) => {
            let (host, path) = match authority_and_path.find('/') {
                Some(slash) => authority_and_path.split_at(slash),
                None => (authority_and_path, ""),
            };
            if !host.is_empty() && !host.eq_ignore_ascii_case("localhost") {
                return Err(Error::invalid(format!(
                    "location {url:?} names the host {host:?}; a file: URL must name this machine (file:///path)"
                )));
            }
            path
        }
        None => rest,
    };
    if path.is_empty() {
        return Err(Error::invalid(format!("location {url:?} names no path")));
    }
    if path.contains(['?', '#']) {
        return Err(Error::invalid(format!(
            "location {url:?} has a query or fragment; a file: URL names a directory only"
        )));
    }
    percent_decode(path).map(PathBuf::from).ok_or_else(|| {
        Error::invalid(format!("location {url:?} has a bad percent escape or is not UTF-8 once decoded"))
    })
}

fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    #[test]
    fn paths_stay_paths() {
        for path in ["store", "./a/b", "/var/lib/x", "a:b/c", "c:/x", "dir with spaces", "x://"] {
            // "x://": one letter is not a scheme.
            assert_eq!(Location::parse(path).unwrap(), Location::Embedded(PathBuf::from(path)), "{path}");
        }
    }

    #[test]
    fn file_urls_open_embedded_stores() {
        let cases = [
            ("file:///var/lib/courses", "/var/lib/courses"),
            ("FILE://localhost/var/lib/a%20b", "/var/lib/a b"),
            ("file:/tmp/x", "/tmp/x"),
            ("file:relative/dir", "relative/dir"),
        ];
        for (url, path) in cases {
            assert_eq!(Location::parse(url).unwrap(), Location::Embedded(PathBuf::from(path)), "{url}");
        }
        for bad in ["file://otherhost/x", "file:", "file:///x?y=1", "file:///a%zz"] {
            let err = Location::parse(bad).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{bad}");
            assert!(err.message().contains(bad), "{}", err.message());
        }
    }

    #[test]
    fn postgres_urls_and_unknown_schemes() {
        for url in ["postgresql://u@h/db?context=c", "postgres://h/db"] {
            assert_eq!(Location::parse(url).unwrap(), Location::Postgres(url.to_string()));
        }
        // The driver takes only a lower-case scheme; the rest is left as written.
        assert_eq!(Location::parse("PostgreSQL://U@H/Db").unwrap(), Location::Postgres("postgresql://U@H/Db".into()));
        assert_eq!(Location::parse("POSTGRES://h/db").unwrap(), Location::Postgres("postgres://h/db".into()));
        for bad in ["mysql://h/db", "http://example.com/x", "s3://bucket/x", "ab://x"] {
            let err = Location::parse(bad).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidArgument);
            assert!(err.message().contains(bad.split("://").next().unwrap()), "{}", err.message());
        }
    }
}
