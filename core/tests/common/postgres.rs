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

/// The server's connections with this `application_name` (a handle's, when its URL sets it):
/// how many use TLS, and how many there are; asked on a plain connection of the test's own to
/// the server at `base`.
pub fn connections_of(base: &str, application: &str) -> (i64, i64) {
    let mut client = postgres::Client::connect(base, postgres::NoTls).unwrap();
    let row = client
        .query_one(
            "SELECT count(*) FILTER (WHERE s.ssl), count(*) FROM pg_stat_activity a \
             JOIN pg_stat_ssl s USING (pid) WHERE a.application_name = $1",
            &[&application],
        )
        .unwrap();
    (row.get(0), row.get(1))
}

/// A batch of `n` events of the merge tests, whose `entity:` tags are all new: their entries
/// fill several pages of a GIN pending list.
pub fn merge_batch(from: usize, n: usize) -> Vec<lapilli_core::Event> {
    (from..from + n)
        .map(|i| lapilli_core::Event::new("Seeded", [format!("entity:{i}"), format!("s10:{}", i % 10)], vec![1; 16]))
        .collect()
}

/// The superuser's URL `base` with another user in it.
pub fn as_user(base: &str, user: &str) -> String {
    let rest = base.split_once('@').expect("user@ in LAPILLI_TEST_POSTGRES_URL").1;
    format!("postgresql://{user}@{rest}")
}

/// The unique tail of a `fresh_context` name, for the roles and schemas a test makes beside it.
pub fn context_suffix(context: &str) -> String {
    context.rsplit('_').next().unwrap().to_string()
}
