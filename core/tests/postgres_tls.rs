//! TLS to the server (`sslmode=verify-full&sslrootcert=...`) against the throwaway cluster of
//! `scripts/postgres.sh`, which accepts TLS with a certificate for 127.0.0.1 signed by a CA made
//! for it (`LAPILLI_TEST_POSTGRES_CA`).

mod common;

use common::postgres::{connections_of, context_url, database_url, fresh_context};
use lapilli_core::{ErrorKind, Event, Options, Query, ReadOptions, Store};

fn ca_file() -> String {
    std::env::var("LAPILLI_TEST_POSTGRES_CA").expect("scripts/postgres.sh start exports LAPILLI_TEST_POSTGRES_CA")
}


#[test]
fn a_store_opened_with_verify_full_and_the_servers_authority_talks_tls() {
    let Some(base) = database_url() else { return };
    let application = fresh_context("lapilli_tls");
    let url = format!(
        "{}&sslmode=verify-full&sslrootcert={}&application_name={application}",
        context_url(&base, &fresh_context("tls")),
        ca_file()
    );
    let store = Store::open(&url, Options::default()).unwrap();
    store.append(vec![Event::new("Opened", ["course:1"], b"over tls".to_vec())], None).unwrap();
    let events = store.read(&Query::all(), ReadOptions::default()).unwrap().collect_all().unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].data, b"over tls");
    // The writer's connection and the read's pooled one: every connection of this handle is
    // encrypted, and there is at least one.
    let (encrypted, all) = connections_of(&base, &application);
    assert!(all >= 1, "no connection of the store was seen");
    assert_eq!(encrypted, all, "{encrypted} of {all} connections use TLS");
    store.close().unwrap();
}

#[test]
fn a_server_whose_authority_is_not_trusted_is_refused_as_io_naming_the_certificate() {
    let Some(base) = database_url() else { return };
    // The default authorities (the web's) do not include the cluster's own CA.
    let url = format!("{}&sslmode=verify-full", context_url(&base, &fresh_context("tls_untrusted")));
    let error = Store::open(&url, Options::default()).err().expect("an untrusted certificate was accepted");
    assert_eq!(error.kind(), ErrorKind::Io, "{}", error.message());
    assert!(error.message().to_lowercase().contains("certificate"), "{}", error.message());
}

#[test]
fn an_authority_file_that_is_missing_or_not_pem_is_invalid_argument_naming_it() {
    let Some(base) = database_url() else { return };
    let dir = tempfile::tempdir().unwrap();
    let not_pem = dir.path().join("not-a-ca.pem");
    std::fs::write(&not_pem, b"hello").unwrap();
    let missing = dir.path().join("missing.pem");
    for path in [&not_pem, &missing] {
        let url = format!("{}&sslmode=verify-full&sslrootcert={}", context_url(&base, "tls_bad_ca"), path.display());
        let error = Store::open(&url, Options::default()).err().expect("a bad authority file was accepted");
        assert_eq!(error.kind(), ErrorKind::InvalidArgument, "{}", error.message());
        assert!(error.message().contains(&path.display().to_string()), "{}", error.message());
    }
    // An authority named without asking for TLS would silently go unused.
    let url = format!("{}&sslrootcert={}", context_url(&base, "tls_bad_ca"), ca_file());
    let error = Store::open(&url, Options::default()).err().expect("sslrootcert without sslmode was accepted");
    assert_eq!(error.kind(), ErrorKind::InvalidArgument);
    assert!(error.message().contains("sslmode"), "{}", error.message());
}

/// The cluster lets `lapilli_cert` in over TLS only with a client certificate of its CA naming it
/// (`scripts/postgres.sh`): `sslcert` and `sslkey` are sent, and without them the server refuses.
fn cert_user() -> Option<(String, String, String)> {
    let url = std::env::var("LAPILLI_TEST_POSTGRES_CERT_URL").ok()?;
    let cert = std::env::var("LAPILLI_TEST_POSTGRES_CLIENT_CERT").ok()?;
    let key = std::env::var("LAPILLI_TEST_POSTGRES_CLIENT_KEY").ok()?;
    Some((url, cert, key))
}

#[test]
fn a_server_that_authenticates_clients_by_certificate_lets_in_a_store_that_sends_one() {
    let Some(_) = database_url() else { return };
    let (base, cert, key) = cert_user().expect("scripts/postgres.sh start exports the client-certificate variables");
    let tls = format!("sslmode=verify-full&sslrootcert={}", ca_file());
    let context = fresh_context("certified");
    let url = format!("{base}?context={context}&{tls}&sslcert={cert}&sslkey={key}");
    let store = Store::open(&url, Options::default()).unwrap();
    let first = store.append(vec![Event::new("Opened", ["course:1"], b"by certificate".to_vec())], None).unwrap();
    let events = store.read(&Query::all(), ReadOptions::default()).unwrap().collect_all().unwrap();
    assert_eq!(events.last().map(|e| (e.position, e.data.clone())), Some((first.first, b"by certificate".to_vec())));
    store.close().unwrap();

    // The same user over TLS without a certificate: the server says no, and it is an I/O error
    // (the connection was refused), not a store opened on some other footing.
    let without = format!("{base}?context={context}&{tls}");
    let error = Store::open(&without, Options::default()).err().expect("the cert user got in without a certificate");
    assert_eq!(error.kind(), ErrorKind::Io, "{}", error.message());
    assert!(error.message().contains("certificate"), "{}", error.message());
}

#[test]
fn a_client_certificate_that_is_missing_or_not_its_keys_is_invalid_argument_naming_it() {
    let Some(_) = database_url() else { return };
    let (base, cert, key) = cert_user().expect("scripts/postgres.sh start exports the client-certificate variables");
    let tls = format!("sslmode=verify-full&sslrootcert={}", ca_file());
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.pem").display().to_string();
    let not_a_key = dir.path().join("not-a-key.pem");
    std::fs::write(&not_a_key, b"hello").unwrap();
    let not_a_key = not_a_key.display().to_string();
    // The CA's certificate with the client's key: a certificate that is not the key's.
    let ca = ca_file();
    for (cert, key, named) in [
        (missing.as_str(), key.as_str(), missing.as_str()),
        (cert.as_str(), missing.as_str(), missing.as_str()),
        (cert.as_str(), not_a_key.as_str(), not_a_key.as_str()),
        (ca.as_str(), key.as_str(), "is not the key of"),
    ] {
        let url = format!("{base}?context=certified&{tls}&sslcert={cert}&sslkey={key}");
        let error = Store::open(&url, Options::default()).err().expect("a bad client certificate was accepted");
        assert_eq!(error.kind(), ErrorKind::InvalidArgument, "{}", error.message());
        assert!(error.message().contains(named), "{}", error.message());
    }
}
