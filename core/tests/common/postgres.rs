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

/// A context name no earlier run used, and whose last part (`context_suffix`) no other call
/// in this process returns: the clock's reading alone gave two tests starting together the
/// same one (CI: two roles named after it, "role ... already exists"), so a reading no later
/// than the last one given out is moved past it.
pub fn fresh_context(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static LAST: AtomicU64 = AtomicU64::new(0);
    let stamp = (std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() % 1_000_000_000_000) as u64;
    let previous = LAST.fetch_update(Ordering::AcqRel, Ordering::Acquire, |last| Some(stamp.max(last + 1))).unwrap();
    format!("{prefix}_{}_{}", std::process::id(), stamp.max(previous + 1))
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

/// Runs `statements` (roles, grants, owners) as the superuser, one test at a time: the tests of
/// a binary run in parallel, and two `GRANT`s on one table at once fail "tuple concurrently
/// updated" (both rewrite its row of `pg_class`). One simple query is one transaction, so the
/// advisory lock taken first is held until the statements are done.
pub fn change_privileges(admin: &mut postgres::Client, statements: &str) -> Result<(), postgres::Error> {
    admin.batch_execute(&format!("SELECT pg_advisory_xact_lock(7362115470311958528); {statements}"))
}

/// Pages in the pending list of the tags index of `context` in `schema` (a name as it is, any
/// characters), taken out of it: what the writer left. Asked as the superuser (only the index's
/// owner may merge).
pub fn pending_pages(admin: &mut postgres::Client, schema: &str, context: &str) -> i64 {
    admin
        .query_one(
            "SELECT gin_clean_pending_list(format('%I.%I', $1::text, $2::text)::regclass)",
            &[&schema, &format!("lapilli_events_{context}_tags")],
        )
        .unwrap()
        .get(0)
}

/// A context made by a login role that owns nothing else, whose tables were then given to
/// another role (a migration role taking them over: `ALTER TABLE ... OWNER TO`); the maker keeps
/// `SELECT, INSERT` and its function still belongs to it. `url` is the maker's URL of the context.
pub struct TablesGivenAway {
    pub context: String,
    pub url: String,
    /// The role that owns the tables now.
    pub owner: String,
    creator: String,
}

impl TablesGivenAway {
    /// Made through the superuser's URL `base`; `prefix` names the context and the roles.
    pub fn make(admin: &mut postgres::Client, base: &str, prefix: &str) -> TablesGivenAway {
        let context = fresh_context(prefix);
        let n = context_suffix(&context);
        let (creator, owner) = (format!("{prefix}_creator_{n}"), format!("{prefix}_owner_{n}"));
        // lapilli_contexts exists already (made here as the superuser if no other test did).
        lapilli_core::Store::open(context_url(base, &fresh_context(prefix)), lapilli_core::Options::default()).unwrap().close().unwrap();
        change_privileges(admin, &format!(
            "CREATE ROLE {creator} LOGIN; CREATE ROLE {owner}; GRANT CREATE ON SCHEMA public TO {creator}; \
             GRANT SELECT, INSERT, UPDATE ON lapilli_contexts TO {creator};"
        ))
        .unwrap();
        let url = context_url(&as_user(base, &creator), &context);
        lapilli_core::Store::open(&url, lapilli_core::Options::default()).unwrap().close().unwrap();
        change_privileges(admin, &format!(
            "ALTER TABLE lapilli_events_{context} OWNER TO {owner}; GRANT SELECT, INSERT ON lapilli_events_{context} TO {creator};"
        ))
        .unwrap();
        TablesGivenAway { context, url, owner, creator }
    }

    /// Drops the context and both roles (best effort: a test asserts after it cleaned up).
    pub fn drop(&self, admin: &mut postgres::Client) {
        let TablesGivenAway { context, creator, owner, .. } = self;
        let _ = change_privileges(admin, &format!(
            "DROP TABLE lapilli_events_{context}; DROP FUNCTION lapilli_merge_{context}(); \
             DELETE FROM lapilli_contexts WHERE name = '{context}'; REVOKE ALL ON lapilli_contexts FROM {creator}; \
             REVOKE CREATE ON SCHEMA public FROM {creator}; DROP ROLE {creator}; DROP ROLE {owner};"
        ));
    }
}
