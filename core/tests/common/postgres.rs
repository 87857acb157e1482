//! The throwaway PostgreSQL server of the Postgres tests (`scripts/postgres.sh start`): its URL
//! from the environment, and fresh contexts in it.

/// The URL in `variable` (`LAPILLI_TEST_POSTGRES_URL`, `LAPILLI_TEST_PGBOUNCER_URL`), or `None`
/// with a "skipped" line; a test that gets `None` returns, unless `LAPILLI_REQUIRE_POSTGRES` is
/// set (as `scripts/test.sh` does), when a missing server fails it instead.
pub fn url_from(variable: &str) -> Option<String> {
    let url = std::env::var(variable).ok().filter(|url| !url.is_empty());
    if url.is_none() {
        assert!(
            std::env::var_os("LAPILLI_REQUIRE_POSTGRES").is_none(),
            "LAPILLI_REQUIRE_POSTGRES is set but {variable} is not (scripts/postgres.sh start)"
        );
        eprintln!("skipped: {variable} is not set");
    }
    url
}

/// The direct server's URL (`LAPILLI_TEST_POSTGRES_URL`).
pub fn database_url() -> Option<String> {
    url_from("LAPILLI_TEST_POSTGRES_URL")
}

/// A context name no earlier run used.
pub fn fresh_context(prefix: &str) -> String {
    let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    format!("{prefix}_{}_{}", std::process::id(), stamp % 1_000_000_000_000)
}

/// `base` with `context=` added to its parameters.
pub fn context_url(base: &str, context: &str) -> String {
    let separator = if base.contains('?') { '&' } else { '?' };
    format!("{base}{separator}context={context}")
}
