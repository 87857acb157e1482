//! The schema, and queries as SQL.
//!
//! One table of events per context, not one table with a context column: every index (the GIN
//! over tags above all, which cannot lead with a context column without the `btree_gin`
//! extension) then holds that context's events only, a context's tag query never walks another
//! context's postings, and a context is dropped or vacuumed on its own. The cost is a table
//! name built from the context's name, which is why that name is restricted to `[a-z0-9_]`.

use postgres::Client;
use postgres::types::{ToSql, Type};

use super::{SCHEMA_VERSION, newer_schema, pg_error};
use crate::error::{Error, Result};
use crate::query::Query;

pub fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Refuses a database whose encoding is not UTF-8: types, tags and query values are any UTF-8,
/// and one the server's encoding (LATIN1, say) cannot hold would fail on the server, in the
/// `COPY` or the condition check of a whole group, other callers' appends with it. SQL_ASCII
/// (bytes kept as sent) holds them too.
///
/// A read-only handle is let in with a warning: it sends no types or tags but its queries', and
/// refusing it would leave a context made in such a database by an earlier version unreadable,
/// even to export it.
pub fn check_encoding(client: &mut Client, redacted: &str, read_only: bool) -> Result<()> {
    let encoding: String = client
        .query_typed_one("SELECT pg_catalog.current_setting('server_encoding')", &[])
        .map_err(|e| pg_error(&format!("cannot read the database's encoding in {redacted}"), &e))?
        .get(0);
    if encoding != "UTF8" && encoding != "SQL_ASCII" {
        if read_only {
            crate::error::report(format_args!(
                "lapilli: the database of {redacted} is encoded in {encoding}: a query naming a type or tag \
                 that encoding cannot hold fails on the server; opened read-only"
            ));
            return Ok(());
        }
        return Err(Error::invalid(format!(
            "the database of {redacted} is encoded in {encoding}; Lapilli stores any UTF-8 in types and tags, \
             so it needs a database created with ENCODING 'UTF8'"
        )));
    }
    Ok(())
}

/// Creates the tables of the context if missing, under an advisory lock so that two processes
/// opening a new database at once do not race on `CREATE TABLE IF NOT EXISTS` (which is not
/// safe against itself). A read-only handle creates nothing: it needs an existing context.
pub fn create_schema(client: &mut Client, context: &str, redacted: &str, read_only: bool) -> Result<()> {
    let fail = |what: &str, e: &postgres::Error| pg_error(&format!("{what} in {redacted}"), e);
    let events = quote_ident(&format!("lapilli_events_{context}"));
    let mut tx = client.transaction().map_err(|e| fail("cannot begin", &e))?;
    if !read_only {
        // Any constant: only Lapilli's schema changes take this lock.
        tx.batch_execute("SELECT pg_advisory_xact_lock(7362115470311958527)")
            .map_err(|e| fail("cannot lock the schema", &e))?;
        // Only if missing: `CREATE TABLE IF NOT EXISTS` checks the schema's CREATE privilege
        // before it looks, so it would refuse a writer that owns nothing (tables made by a
        // migration's user, written by the application's) even with the table there.
        let missing: bool = tx
            .query_typed_one("SELECT to_regclass('lapilli_contexts') IS NULL", &[])
            .map_err(|e| fail("cannot look for lapilli_contexts", &e))?
            .get(0);
        if missing {
            tx.batch_execute(
                "CREATE TABLE IF NOT EXISTS lapilli_contexts (
                     name text PRIMARY KEY,
                     schema_version integer NOT NULL,
                     head bigint NOT NULL DEFAULT 0,
                     last_recorded_at bigint NOT NULL DEFAULT 0,
                     created_at timestamptz NOT NULL DEFAULT now()
                 )",
            )
            .map_err(|e| fail("cannot create lapilli_contexts", &e))?;
        }
    }
    // Unnamed statements only (`query_typed`, `batch_execute`), here and everywhere in the
    // backend: a named prepared statement outlives the transaction on its server connection,
    // and behind a transaction-pooling PgBouncer that connection is then handed to another
    // client, whose own statement of the same name fails ("prepared statement \"s3\" already
    // exists").
    let exists: Option<i32> = match tx.query_typed("SELECT schema_version FROM lapilli_contexts WHERE name = $1", &[(&context, Type::TEXT)])
    {
        Ok(rows) => rows.first().map(|row| row.get(0)),
        // A read-only handle on a database nobody wrote to yet.
        Err(e) if read_only && e.code() == Some(&postgres::error::SqlState::UNDEFINED_TABLE) => None,
        Err(e) => return Err(fail("cannot read lapilli_contexts", &e)),
    };
    match exists {
        Some(found) if found > SCHEMA_VERSION => return Err(newer_schema(redacted, context, found)),
        Some(_) => {}
        // The kind of the embedded backend's read-only open of a missing directory (`Io`,
        // NotFound): the same call, the same answer, whichever the store is in.
        None if read_only => {
            return Err(Error::io_message(
                format!("context {context:?} does not exist in {redacted}; a read-only handle opens an existing context"),
                std::io::ErrorKind::NotFound,
            ));
        }
        None => {
            // The events of one context. Positions are the primary key (a B-tree, also what
            // windows and order use); tags are sorted as reads return them.
            let index_tags = quote_ident(&format!("lapilli_events_{context}_tags"));
            let index_types = quote_ident(&format!("lapilli_events_{context}_type"));
            tx.batch_execute(&format!(
                "CREATE TABLE IF NOT EXISTS {events} (
                     position bigint PRIMARY KEY,
                     type text NOT NULL,
                     tags text[] NOT NULL,
                     data bytea NOT NULL,
                     recorded_at bigint NOT NULL
                 );
                 CREATE INDEX IF NOT EXISTS {index_tags} ON {events} USING gin (tags)
                     WITH (fastupdate = on, gin_pending_list_limit = {PENDING_LIST_KIB});
                 CREATE INDEX IF NOT EXISTS {index_types} ON {events} (type, position);"
            ))
            .map_err(|e| fail("cannot create the events table", &e))?;
            // The index's qualified name, fixed now: the function runs with its own search
            // path, and a later change of the writer's must not point it at another index. The
            // statement is written by the server (`format`'s `%I` and `%L`), since the schema's
            // name may hold any character.
            let create_function: String = tx
                .query_typed_one(
                    &format!(
                        "SELECT format('CREATE OR REPLACE FUNCTION %I.%I() RETURNS bigint LANGUAGE sql SECURITY DEFINER \
                                        SET search_path = pg_catalog, pg_temp AS %L', current_schema(), $1::text, {})",
                        merge_body("current_schema()", "$2::text")
                    ),
                    &[(&merge_tags_name(context), Type::TEXT), (&format!("lapilli_events_{context}_tags"), Type::TEXT)],
                )
                .map_err(|e| fail("cannot write the function that merges the tags index", &e))?
                .get(0);
            tx.batch_execute(&create_function)
                .map_err(|e| fail("cannot create the function that merges the tags index", &e))?;
            tx.query_typed(
                "INSERT INTO lapilli_contexts (name, schema_version) VALUES ($1, $2)",
                &[(&context, Type::TEXT), (&SCHEMA_VERSION, Type::INT4)],
            )
            .map_err(|e| fail("cannot register the context", &e))?;
        }
    }
    tx.commit().map_err(|e| fail("cannot commit the schema", &e))
}

/// The pending list of the tags index, in KiB (PostgreSQL's own default, set explicitly so
/// that a server's `gin_pending_list_limit` does not change it). It bounds what a tag look
/// scans beyond the index proper while a writer that cannot merge (below) writes.
const PENDING_LIST_KIB: u32 = 4096;

/// The name of the function that merges the tags index's pending list into the index proper.
///
/// The tags index takes new entries into its pending list (`fastupdate`), which costs a
/// fraction of inserting them one by one into their posting lists: the merge sorts a group's
/// entries by tag and adds each tag's positions at once (a group of 32,768 events of four tags
/// was written in 0.6 s against 1.6 s). But every tag look scans the pending list, so the
/// writer merges it in the transaction that filled it, and no committed state has one. Merging
/// needs the index's owner (`gin_clean_pending_list` checks): the function is `SECURITY
/// DEFINER`, created by the context's creator, so a writer that does not own the tables merges
/// too.
fn merge_tags_name(context: &str) -> String {
    format!("lapilli_merge_{context}")
}

/// The merge function's body as a SQL expression (the text `create_schema` gives the function,
/// and the one `merge_tags_call` requires of it), for the index named by the SQL expressions
/// `schema` and `index`.
fn merge_body(schema: &str, index: &str) -> String {
    format!("format('SELECT pg_catalog.gin_clean_pending_list(%L::regclass)', format('%I.%I', {schema}, {index}))")
}

/// The call that merges the context's tags index, schema-qualified as this open found it, or
/// None where this connection's user may not make it or it would fail: a context created
/// before there was a merge function (its index has no pending list); a function whose body is
/// not the one this version writes for the index of its own schema (the schema renamed since,
/// or the function replaced), or that no longer runs as its owner (`SECURITY INVOKER`); its
/// schema's tags index missing (renamed, moved or dropped); `EXECUTE` refused; or an owner who
/// may not merge the index (the tables given to another role). Without a merge the server
/// merges the list once it outgrows `PENDING_LIST_KIB`, and autovacuum does. A function that is
/// there but cannot be used is said on stderr (tag reads then scan up to `PENDING_LIST_KIB`
/// more, and what would fix it is the operator's to do); a context without one (made before
/// there was a merge) is not: its index has no pending list.
pub fn merge_tags_call(client: &mut Client, context: &str, redacted: &str) -> Result<Option<String>> {
    let index = format!("lapilli_events_{context}_tags");
    let rows = client
        .query_typed(
            &format!(
                "SELECT quote_ident(n.nspname) || '.' || quote_ident(p.proname) || '()', p.prosrc = {} AND p.prosecdef, \
                        i.oid IS NOT NULL, has_function_privilege(p.oid, 'EXECUTE'), \
                        COALESCE(pg_has_role(p.proowner, i.relowner, 'USAGE'), false), format('%I.%I', n.nspname, $2::text) \
                 FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace \
                 LEFT JOIN pg_class i ON i.oid = to_regclass(format('%I.%I', n.nspname, $2::text)) \
                 WHERE p.oid = to_regprocedure($1)",
                merge_body("n.nspname", "$2::text")
            ),
            &[(&format!("{}()", quote_ident(&merge_tags_name(context))), Type::TEXT), (&index, Type::TEXT)],
        )
        .map_err(|e| pg_error(&format!("cannot look up the merge function of context {context:?} in {redacted}"), &e))?;
    let Some(row) = rows.first() else { return Ok(None) };
    let call: String = row.get(0);
    let (as_written, index_there, executable, owner_may_merge): (bool, bool, bool, bool) = (row.get(1), row.get(2), row.get(3), row.get(4));
    let index: String = row.get(5);
    let unusable = if !as_written {
        "it is not the SECURITY DEFINER function this version makes for the tags index of its own schema (the schema \
         renamed since, or the function replaced?)"
            .to_string()
    } else if !index_there {
        format!("its index {index} is not there (renamed, moved or dropped?)")
    } else if !executable {
        "this user may not EXECUTE it".to_string()
    } else if !owner_may_merge {
        format!("its owner may not merge {index} (ALTER FUNCTION ... OWNER TO the index's owner)")
    } else {
        return Ok(Some(call));
    };
    crate::error::report(format_args!(
        "lapilli: the writer of context {context:?} in {redacted} cannot merge the tags index's pending list with {call}: \
         {unusable}; it appends without merging, and tag reads scan the pending list until the server merges it"
    ));
    Ok(None)
}

/// How a statement that called the merge function failed because of it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum MergeFailure {
    /// It will fail again: the function is gone, may not be called, or its body names an
    /// index that is no longer there (renamed or moved since the open). The handle stops merging.
    Lasting,
    /// Something that may pass raised inside it (a statement timeout or a cancel, a lock
    /// timeout, a deadlock, memory): the group is decided again without it, and the next merges.
    Once,
}

/// Whether, and how, `e` was the merge's: raised inside the function (its `where_` names it) or
/// about it (its message does: the function missing, `EXECUTE` refused). Any other error of the
/// statement that calls it (UPDATE of the head refused, say) is the group's own, not retried.
pub fn merge_failure(e: &postgres::Error) -> Option<MergeFailure> {
    let db = e.as_db_error()?;
    let names_merge = |text: &str| text.contains("lapilli_merge_");
    let inside = db.where_().is_some_and(names_merge);
    let about = names_merge(db.message());
    if !inside && !about {
        return None;
    }
    // Class 42 (undefined objects, privileges) and 3F (undefined schema) do not pass by themselves.
    let code = db.code().code();
    Some(if code.starts_with("42") || code.starts_with("3F") { MergeFailure::Lasting } else { MergeFailure::Once })
}

pub fn head(client: &mut Client, context: &str, redacted: &str) -> Result<u64> {
    let row = client
        .query_typed_one("SELECT head FROM lapilli_contexts WHERE name = $1", &[(&context, Type::TEXT)])
        .map_err(|e| pg_error(&format!("cannot read the head of context {context:?} in {redacted}"), &e))?;
    Ok(row.get::<_, i64>(0) as u64)
}

/// A query as a boolean SQL expression over the events table, with its parameters. An item is
/// `type = ANY(<its types>)` (when it has types) and `tags @> <its tags>` (when it has tags;
/// answered by the GIN index); items are OR-ed.
///
/// Every item's types are one slice of a single `text[]` parameter and its tags one slice of
/// another (`($n::text[])[3:5]`, folded to a constant when the statement is planned, so the
/// indexes still answer it), rather than a parameter per item: a statement holds at most 65535
/// parameters, and the writer checks up to 256 conditions in one statement, so queries of a
/// few hundred items used to overflow it and fail every append of their group.
///
/// PostgreSQL's `text` cannot hold U+0000 (an event holding one is refused before it is
/// queued), so a value with one matches no stored event: an item naming such a tag is left out,
/// and so is such a type; sending it would fail the whole statement, and with it the group.
pub struct Condition {
    pub sql: String,
    /// Every parameter is a list of strings (`text[]`); plain values keep `ReadResult` `Send`.
    pub params: Vec<Vec<String>>,
}

impl Condition {
    /// `first_param` is the number of the first `$n` this expression may use.
    pub fn of(query: &Query, first_param: usize) -> Condition {
        let Query::Items(items) = query else { return Condition { sql: "true".into(), params: Vec::new() } };
        let storable = |value: &String| !value.contains('\0');
        let mut all_types: Vec<String> = Vec::new();
        let mut all_tags: Vec<String> = Vec::new();
        // (slice of the types, slice of the tags), 1-based and inclusive as SQL slices are.
        let mut kept = Vec::with_capacity(items.len());
        for item in items {
            let types: Vec<&String> = item.types.iter().filter(|t| storable(t)).collect();
            if !item.tags.iter().all(storable) || (!item.types.is_empty() && types.is_empty()) {
                continue;
            }
            let type_slice = (!types.is_empty()).then(|| {
                let first = all_types.len() + 1;
                all_types.extend(types.into_iter().cloned());
                (first, all_types.len())
            });
            let tag_slice = (!item.tags.is_empty()).then(|| {
                let first = all_tags.len() + 1;
                all_tags.extend(item.tags.iter().cloned());
                (first, all_tags.len())
            });
            kept.push((type_slice, tag_slice));
        }
        if kept.is_empty() {
            return Condition { sql: "false".into(), params: Vec::new() };
        }
        let mut params = Vec::new();
        let types_param = (!all_types.is_empty()).then(|| {
            params.push(all_types);
            first_param + params.len() - 1
        });
        let tags_param = (!all_tags.is_empty()).then(|| {
            params.push(all_tags);
            first_param + params.len() - 1
        });
        let alternatives: Vec<String> = kept
            .into_iter()
            .map(|(type_slice, tag_slice)| {
                let mut parts = Vec::new();
                if let (Some((a, b)), Some(n)) = (type_slice, types_param) {
                    parts.push(format!("type = ANY((${n}::text[])[{a}:{b}])"));
                }
                if let (Some((a, b)), Some(n)) = (tag_slice, tags_param) {
                    parts.push(format!("tags @> (${n}::text[])[{a}:{b}]"));
                }
                format!("({})", parts.join(" AND "))
            })
            .collect();
        Condition { sql: format!("({})", alternatives.join(" OR ")), params }
    }
}

/// The parameters of a statement, `leading` first, then the condition's, with their types for
/// `query_typed`: one round trip (no prepare) per statement.
/// The leading ones are positions (`bigint`); a condition's are all `text[]`.
pub fn typed_params<'a>(leading: &[&'a (dyn ToSql + Sync)], condition: &'a Condition) -> Vec<(&'a (dyn ToSql + Sync), Type)> {
    let mut all: Vec<(&(dyn ToSql + Sync), Type)> = leading.iter().map(|p| (*p, Type::INT8)).collect();
    all.extend(condition.params.iter().map(|p| (p as &(dyn ToSql + Sync), Type::TEXT_ARRAY)));
    all
}
