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
    assert!(error.message().contains("requires a valid client certificate"), "{}", error.message());
}

/// `openssl` with the arguments, in `dir`; panics with its stderr if it fails.
fn openssl(dir: &std::path::Path, args: &[&str]) {
    let out = std::process::Command::new("openssl").args(args).current_dir(dir).output().expect("openssl runs");
    assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// The reason of an open refused as `InvalidArgument`, without the location that precedes it
/// (the URL, which names every file too, so it cannot show which one was blamed).
fn refusal(url: &str) -> String {
    let error = Store::open(url, Options::default()).err().expect("a bad client certificate was accepted");
    assert_eq!(error.kind(), ErrorKind::InvalidArgument, "{}", error.message());
    let message = error.message().to_string();
    message.split_once("\": ").map_or(message.clone(), |(_, reason)| reason.to_string())
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
    // The client's key, encrypted (PKCS#8) and in the legacy encrypted form.
    let encrypted = dir.path().join("encrypted.key").display().to_string();
    openssl(dir.path(), &["pkcs8", "-topk8", "-in", &key, "-out", &encrypted, "-passout", "pass:secret"]);
    let legacy = dir.path().join("legacy.key").display().to_string();
    openssl(dir.path(), &["ec", "-in", &key, "-out", &legacy, "-aes256", "-passout", "pass:secret"]);
    // A version 1 certificate for the client's key (openssl x509 -req without v3 extensions).
    let csr = dir.path().join("v1.csr").display().to_string();
    let v1 = dir.path().join("v1.pem").display().to_string();
    openssl(dir.path(), &["req", "-new", "-key", &key, "-subj", "/CN=lapilli_cert", "-out", &csr]);
    openssl(dir.path(), &["x509", "-req", "-in", &csr, "-signkey", &key, "-days", "1", "-out", &v1]);
    // The CA's certificate with the client's key: a certificate that is not the key's.
    let ca = ca_file();
    let q = |path: &str| format!("{path:?}");
    for (cert, key, reason) in [
        (missing.as_str(), key.as_str(), format!("sslcert {} cannot be read", q(missing.as_str()))),
        (cert.as_str(), missing.as_str(), format!("sslkey {} cannot be read", q(missing.as_str()))),
        (cert.as_str(), not_a_key.as_str(), format!("sslkey {} is not a PEM private key", q(not_a_key.as_str()))),
        (cert.as_str(), encrypted.as_str(), format!("sslkey {} is encrypted", q(encrypted.as_str()))),
        (cert.as_str(), legacy.as_str(), format!("sslkey {} is encrypted", q(legacy.as_str()))),
        (ca.as_str(), key.as_str(), format!("sslkey {} is not the key of the first certificate in sslcert {}", q(key.as_str()), q(ca.as_str()))),
        (v1.as_str(), key.as_str(), format!("the first certificate in sslcert {} cannot be used", q(v1.as_str()))),
    ] {
        let url = format!("{base}?context=certified&{tls}&sslcert={cert}&sslkey={key}");
        let reason_given = refusal(&url);
        assert!(reason_given.starts_with(&reason), "expected {reason:?}, got {reason_given:?}");
        assert!(!reason_given.contains("secret"), "{reason_given}");
    }
}

#[test]
fn a_client_certificate_sent_with_its_intermediate_is_accepted_and_without_it_refused_by_the_server() {
    let Some(_) = database_url() else { return };
    let (base, _, _) = cert_user().expect("scripts/postgres.sh start exports the client-certificate variables");
    let ca = ca_file();
    let ca_key = std::path::Path::new(&ca).with_file_name("ca.key").display().to_string();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let p = |name: &str| d.join(name).display().to_string();
    std::fs::write(d.join("intermediate.ext"), "basicConstraints=critical,CA:TRUE\nkeyUsage=keyCertSign\n").unwrap();
    std::fs::write(d.join("leaf.ext"), "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=clientAuth\n").unwrap();
    for args in [
        vec!["req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-subj", "/CN=Lapilli test intermediate", "-keyout", "intermediate.key", "-out", "intermediate.csr"],
        vec!["x509", "-req", "-in", "intermediate.csr", "-CA", ca.as_str(), "-CAkey", ca_key.as_str(), "-CAcreateserial", "-days", "1", "-extfile", "intermediate.ext", "-out", "intermediate.pem"],
        vec!["req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-subj", "/CN=lapilli_cert", "-keyout", "leaf.key", "-out", "leaf.csr"],
        vec!["x509", "-req", "-in", "leaf.csr", "-CA", "intermediate.pem", "-CAkey", "intermediate.key", "-CAcreateserial", "-days", "1", "-extfile", "leaf.ext", "-out", "leaf.pem"],
    ] {
        openssl(d, &args);
    }
    let chain = format!("{}{}", std::fs::read_to_string(p("leaf.pem")).unwrap(), std::fs::read_to_string(p("intermediate.pem")).unwrap());
    std::fs::write(d.join("chain.pem"), chain).unwrap();
    let tls = format!("sslmode=verify-full&sslrootcert={ca}");
    let context = fresh_context("certified_chain");
    let url = format!("{base}?context={context}&{tls}&sslcert={}&sslkey={}", p("chain.pem"), p("leaf.key"));
    let store = Store::open(&url, Options::default()).unwrap();
    store.append(vec![Event::new("Opened", ["course:2"], b"by chain".to_vec())], None).unwrap();
    store.close().unwrap();
    // The leaf alone: the server cannot link it to its CA and refuses the handshake (Io).
    let url = format!("{base}?context={context}&{tls}&sslcert={}&sslkey={}", p("leaf.pem"), p("leaf.key"));
    let error = Store::open(&url, Options::default()).err().expect("a leaf without its intermediate got in");
    assert_eq!(error.kind(), ErrorKind::Io, "{}", error.message());
}
