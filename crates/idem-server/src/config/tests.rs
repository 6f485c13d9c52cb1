//! The config's loading, layering and checks, on files written to a temporary directory.

use idem_core::gateway::{InFlightPolicy, KeyPolicy};

use super::*;

fn load(toml: &str, env: &[(&str, &str)], o: &Overrides) -> Result<Config, ConfigError> {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("idem.toml");
    std::fs::write(&path, toml).expect("write config");
    let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string()));
    Config::load(Some(&path), env, o)
}

#[test]
fn a_toml_mistake_says_where_without_quoting_a_secrets_line() {
    let text = "[[auth.token]]\nname = \"partner\"\ntoken = \"s3cret-never-shown\nsha256 = 1\n";
    let e = load(text, &[], &Overrides::default()).expect_err("unterminated string").to_string();
    assert!(e.contains("idem.toml is not valid TOML: line 3, column"), "{e}");
    assert!(!e.contains("s3cret") && e.contains("`token` holds a secret)\n    3 | token = …\n"), "{e}");
}

#[test]
fn a_syntax_mistake_is_shown_in_words_and_hides_no_other_mistake() {
    let text = "[log]\nlevel = info\n[limits]\nmax_body_byte = 5\n";
    let e = load(text, &[], &Overrides::default()).expect_err("two mistakes").to_string();
    assert!(e.starts_with("2 mistakes in the config:\n"), "{e}");
    for part in [
        "idem.toml is not valid TOML: line 2, column 9: a bare word where a value is expected: \
         strings need quotes: level = \"info\"",
        "\n    2 | level = info\n      |         ^\n",
        "checked with line 2 left out",
        "`limits.max_body_byte` (idem.toml line 4, column 1): unknown field",
        "Did you mean `max_body_bytes`?",
    ] {
        assert!(e.contains(part), "{part} in:\n{e}");
    }
    assert!(!e.contains("invalid float"), "not the parser's words: {e}");
    let alone = load("[log]\nlevel = info\n", &[], &Overrides::default()).expect_err("still a mistake").to_string();
    assert!(alone.starts_with("config file ") && alone.contains("line 2, column 9"), "{alone}");
    let source = "[[sources]]\nname = \"p\"\nhandler_url = http://127.0.0.1:9/h\nevent_id = \"/id\"\n\
                  signing_secret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\n";
    let e = load(source, &[], &Overrides::default()).expect_err("a bare URL").to_string();
    assert!(e.contains("handler_url = \"http://127.0.0.1:9/h\""), "{e}");
    assert!(!e.contains("missing field"), "a key left out for its syntax is not missing too: {e}");
}

#[test]
fn reload_reads_the_same_layers_again() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("idem.toml");
    std::fs::write(&path, "[auth]\ntokens = [\"one\"]\n").expect("write config");
    let env = vec![("IDEM_LIMITS__MAX_BODY_BYTES".to_owned(), "1234".to_owned()), ("HOME".to_owned(), "/x".to_owned())];
    let o = Overrides { listen: Some("127.0.0.1:9999".into()), ..Overrides::default() };
    let c = Config::load(Some(&path), env, &o).expect("config");
    std::fs::write(&path, "[auth]\ntokens = [\"two\"]\n").expect("write config");
    let again = c.reload().expect("loaded from layers").expect("valid");
    assert_eq!(again.auth.tokens.iter().map(|t| t.expose().to_owned()).collect::<Vec<_>>(), ["two"]);
    assert_eq!((again.limits.max_body_bytes, again.listen.port()), (1234, 9999), "the same variables and flags");
    assert!(!format!("{:?}", c.origin).contains("1234"), "the variables are not in its Debug");
    assert!(Config::default().reload().is_none(), "a config made in code has nothing to read again");
}

#[test]
fn defaults_need_nothing() {
    let c = Config::load(None, Vec::new(), &Overrides::default()).expect("defaults");
    assert_eq!(c.listen.to_string(), "127.0.0.1:7070");
    assert_eq!(c.data_dir, PathBuf::from("./idem-data"));
    assert_eq!(c.store, StoreConfig::Embedded {});
    assert_eq!(c.limits.max_body_bytes, 1 << 20);
}

#[test]
fn the_embedded_store_is_called_so_and_its_old_name_still_works_with_a_warning() {
    let c = load("[store]\ntype = \"embedded\"\n", &[], &Overrides::default()).expect("embedded");
    assert_eq!((&c.store, c.warnings.len()), (&StoreConfig::Embedded {}, 0));
    assert!(c.to_redacted_toml().contains("type = \"embedded\""), "config check prints the new name");
    let c = load("[store]\ntype = \"sqlite\"\n", &[], &Overrides::default()).expect("sqlite");
    assert_eq!(c.store, StoreConfig::Embedded {});
    assert!(c.warnings.iter().any(|w| w.contains("old name") && w.contains("\"embedded\"")), "{:?}", c.warnings);
    let flag = Overrides { store: Some("sqlite".into()), ..Overrides::default() };
    let c = load("", &[], &flag).expect("--store sqlite");
    assert_eq!((&c.store, c.warnings.len()), (&StoreConfig::Embedded {}, 1));
}

#[test]
fn a_pooler_and_a_direct_url_are_read_and_the_url_never_printed() {
    let file = "[store]\ntype = \"postgres\"\nurl = \"postgres://idem:pw1@pgbouncer:6432/idem\"\n\
                pooler = \"transaction\"\ndirect_url = \"postgres://idem:pw2@db:5432/idem\"\n";
    let c = load(file, &[], &Overrides::default()).expect("load");
    let StoreConfig::Postgres { pooler, direct_url, .. } = &c.store else { panic!("postgres: {:?}", c.store) };
    assert_eq!((*pooler, pooler.for_store()), (Pooler::Transaction, idem_postgres::Pooler::Transaction));
    assert_eq!(direct_url.as_ref().map(Secret::expose), Some("postgres://idem:pw2@db:5432/idem"));
    let printed = format!("{}{:?}", c.to_redacted_toml(), c);
    assert!(printed.contains("pooler = \"transaction\""), "{printed}");
    assert!(!printed.contains("pw1") && !printed.contains("pw2"), "{printed}");

    let session = load(&file.replace("\"transaction\"", "\"session\""), &[], &Overrides::default()).expect("session");
    let StoreConfig::Postgres { pooler, .. } = session.store else { panic!("postgres") };
    assert_eq!(pooler.for_store(), idem_postgres::Pooler::None, "a session pooler changes nothing");
    let err = load(&file.replace("\"transaction\"", "\"statement\""), &[], &Overrides::default()).unwrap_err();
    assert!(err.to_string().contains("`none`, `session`, `transaction`"), "{err}");
    let bare = load("[store]\ntype = \"postgres\"\nurl = \"postgres://db/idem\"\n", &[], &Overrides::default());
    let StoreConfig::Postgres { pooler, direct_url, .. } = bare.expect("load").store else { panic!("postgres") };
    assert_eq!((pooler, direct_url), (Pooler::None, None), "neither is needed");
}

#[test]
fn layers_apply_in_order() {
    let file = "listen = \"127.0.0.1:1111\"\n[namespaces.notified_articles]\ndefault_ttl = \"90d\"\n";
    let env = [
        ("IDEM_LISTEN", "127.0.0.1:2222"),
        ("IDEM_SWEEPER__BATCH", "50"),
        ("IDEM_TOKEN", "client-only"),
        ("IDEM_TEST_DATABASE_URL", "postgres://for-the-test-suite"),
    ];
    let c = load(file, &env, &Overrides::default()).expect("load");
    assert_eq!(c.listen.to_string(), "127.0.0.1:2222", "env beats file");
    assert_eq!(c.sweeper.batch, 50);
    assert_eq!(c.default_ttl("notified_articles"), Some(Duration::from_secs(90 * 86_400)));
    let flags = Overrides { listen: Some("127.0.0.1:3333".into()), ..Overrides::default() };
    let c = load(file, &env, &flags).expect("load");
    assert_eq!(c.listen.to_string(), "127.0.0.1:3333", "flags beat env");
}

#[test]
fn unknown_keys_and_bad_values_are_named() {
    let err = load("[namespaces.a]\ndefualt_ttl = \"1d\"\n", &[], &Overrides::default()).unwrap_err();
    assert!(err.to_string().contains("namespaces.a") && err.to_string().contains("defualt_ttl"), "{err}");
    let err = load("[namespaces.a]\ndefault_ttl = \"5x\"\n", &[], &Overrides::default()).unwrap_err();
    assert!(err.to_string().contains("namespaces.a.default_ttl"), "{err}");
    let err = load("", &[("IDEM_LIMITS__MAX_BODY_BYTE", "5")], &Overrides::default()).unwrap_err();
    assert!(err.to_string().contains("max_body_byte"), "a typo inside a config section is an error: {err}");
    let err = load("[namespaces.Bad]\n", &[], &Overrides::default()).unwrap_err();
    assert!(err.to_string().contains("namespaces.Bad"), "{err}");
    let err = load("[store]\ntype = \"sqlite\"\nurl = \"postgres://x\"\n", &[], &Overrides::default()).unwrap_err();
    assert!(err.to_string().contains("url"), "{err}");
}

#[test]
fn gateway_routes_take_the_contract_defaults() {
    let file = "[gateway]\nlisten = \"127.0.0.1:8080\"\nupstream = \"http://127.0.0.1:3000\"\n\n[[gateway.routes]]\npath = \"/orders\"\nkey = \"required\"\nttl = \"48h\"\n";
    let c = load(file, &[], &Overrides::default()).expect("load");
    let routes = c.gateway.as_ref().expect("gateway").routes(None, None);
    let orders = &routes.0[0];
    assert_eq!(orders.methods, vec![http::Method::POST, http::Method::PATCH]);
    assert_eq!(orders.key, KeyPolicy::Required);
    assert_eq!(orders.ttl, Duration::from_secs(48 * 3600));
    assert_eq!(orders.lease, Duration::from_secs(60));
    assert_eq!(orders.upstream_timeout, Duration::from_secs(30));
    assert_eq!(orders.in_flight, InFlightPolicy::Reject);
    assert!(!orders.store_5xx);
    let bad = load(&file.replace("/orders", "orders"), &[], &Overrides::default()).unwrap_err();
    assert!(bad.to_string().contains("gateway.routes[0]"), "{bad}");
    let bad = load(&file.replace("http://127.0.0.1:3000", "ftp://x"), &[], &Overrides::default()).unwrap_err();
    assert!(bad.to_string().contains("gateway.upstream"), "{bad}");
    let bad = load(&file.replace("key = \"required\"", "key = \"sometimes\""), &[], &Overrides::default()).unwrap_err();
    assert!(bad.to_string().contains("gateway.routes[0].key"), "{bad}");
}

#[test]
fn gateway_scopes_jwt_and_path_case_are_read_and_their_mistakes_named() {
    let gateway =
        "[gateway]\nlisten = \"127.0.0.1:8080\"\nupstream = \"http://127.0.0.1:3000\"\npath_case = \"insensitive\"\n";
    let jwt = "[gateway.jwt]\nsecret = \"s3cret-s3cret-s3cret-s3cret-s3cret\"\nissuer = \"https://login.example\"\n";
    let routes = "[[gateway.routes]]\npath = \"/orders\"\nscope = [\"cookie:session\", \"jwt:sub\"]\n\
                  [[gateway.routes]]\npath = \"/refunds\"\npath_case = \"sensitive\"\nscope = []\n";
    let c = load(&format!("{gateway}{routes}{jwt}"), &[], &Overrides::default()).expect("load");
    let g = c.gateway.as_ref().expect("gateway");
    let verifier = Arc::new(idem_gateway::JwtVerifier::hs256(&[7; 32]).expect("secret"));
    let live = g.routes(Some(&verifier), None);
    use idem_core::gateway::PathCase;
    assert_eq!((live.0[0].path_case, live.0[1].path_case), (PathCase::Insensitive, PathCase::Sensitive));
    assert!(live.0[0].jwt.is_some() && live.0[1].jwt.is_none(), "the verifier goes to routes that read jwt:");
    let shown: Vec<String> = live.0[0].scope.iter().map(ToString::to_string).collect();
    assert_eq!(shown, ["cookie:session", "jwt:sub"]);
    assert!(c.warnings.iter().any(|w| w.starts_with("gateway.routes[1] (/refunds): scope = []")), "{:?}", c.warnings);
    let printed = c.to_redacted_toml();
    assert!(
        printed.contains("path_case = \"insensitive\"") && printed.contains("secret = \"[redacted]\""),
        "{printed}"
    );
    assert!(!printed.contains("s3cret"), "{printed}");

    let err = |text: String| load(&text, &[], &Overrides::default()).expect_err("refused").to_string();
    let bad_part = err(format!("{gateway}{}{jwt}", routes.replace("jwt:sub", "query:user")));
    assert!(bad_part.contains("gateway.routes[0].scope[1]") && bad_part.contains("\"cookie:NAME\""), "{bad_part}");
    let unverified = err(format!("{gateway}{routes}"));
    assert!(unverified.contains("gateway.routes[0].scope[1]") && unverified.contains("[gateway.jwt]"), "{unverified}");
    let short = err(format!("{gateway}{routes}{}", jwt.replace("s3cret-s3cret-s3cret-s3cret-s3cret", "s3cret")));
    assert!(short.contains("gateway.jwt.secret") && !short.contains("s3cret"), "{short}");
    let empty = err(format!("{gateway}{routes}{}", jwt.replace("https://login.example", "")));
    assert!(empty.contains("gateway.jwt.issuer"), "{empty}");
    let two = err(format!("{gateway}{routes}{jwt}public_key_file = \"/k.pem\"\n"));
    assert!(two.contains("`gateway.jwt`") && two.contains("exactly one"), "{two}");
    let case =
        err(format!("{gateway}{}", "[[gateway.routes]]\npath = \"/orders\"\n[[gateway.routes]]\npath = \"/ORDERS\"\n"));
    assert!(
        case.contains("gateway.routes[1]") && case.contains("gateway.routes[0]"),
        "an insensitive route takes every case: {case}"
    );
}

#[test]
fn sources_take_the_contract_defaults_and_are_checked() {
    let file = "[[sources]]\nname = \"partner\"\nhandler_url = \"http://127.0.0.1:9000/handle\"\nevent_id = \"/external_event_id\"\nsigning_secret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\n";
    let c = load(file, &[], &Overrides::default()).expect("load");
    let source = &c.sources[0];
    assert_eq!((source.max_attempts, source.attempt_timeout.0), (3, Duration::from_secs(120)));
    assert_eq!(source.backoff.iter().map(|d| d.0.as_secs()).collect::<Vec<_>>(), [10, 60, 300]);
    assert!(!c.to_redacted_toml().contains("MfKQ9r8"), "the secret is redacted");
    let bad = load(&file.replace("whsec_MfKQ", "MfKQ"), &[], &Overrides::default()).unwrap_err();
    assert!(bad.to_string().contains("sources[0]") && bad.to_string().contains("signing_secret"), "{bad}");
    assert!(!bad.to_string().contains("MfKQ9r8"), "errors never repeat the secret: {bad}");
    let bad = load(&file.replace("/external_event_id", "external_event_id"), &[], &Overrides::default()).unwrap_err();
    assert!(bad.to_string().contains("event_id"), "{bad}");
}

#[test]
fn a_source_takes_a_list_of_secrets_while_rotating() {
    let file = "[[sources]]\nname = \"partner\"\nhandler_url = \"http://127.0.0.1:9000/handle\"\nevent_id = \"/id\"\n";
    let (new, old) = ("whsec_bmV3LXNlY3JldC1mb3Itcm90YXRpb24tMDEyMzQ1", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
    let rotating = format!("{file}signing_secret = [\"{new}\", \"{old}\"]\nverify_secret = [\"{old}\", \"{new}\"]\n");
    let c = load(&rotating, &[], &Overrides::default()).expect("load");
    assert_eq!(c.sources[0].signing_secret.len(), 2);
    assert_eq!(c.sources[0].verify_secret.as_ref().map(|s| s.len()), Some(2));
    let shown = c.to_redacted_toml();
    assert!(shown.contains("[redacted]") && !shown.contains("MfKQ9r8") && !shown.contains("bmV3"), "{shown}");
    for (bad, says) in [
        (format!("{file}signing_secret = []\n"), "at least one"),
        (format!("{file}signing_secret = [\"{old}\", \"MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"]\n"), "whsec_"),
        (
            format!(
                "{file}signing_secret = \"{old}\"\nverify_secret = [\"{old}\", \"{old}\", \"{old}\", \"{old}\", \"{old}\"]\n"
            ),
            "at most 4",
        ),
    ] {
        let e = load(&bad, &[], &Overrides::default()).expect_err(says).to_string();
        assert!(e.contains("sources[0]") && e.contains(says) && !e.contains("MfKQ9r8"), "{e}");
    }
}

#[test]
fn the_printed_config_is_the_effective_one_and_loads_again() {
    let file = "[gateway]\nlisten = \"127.0.0.1:8080\"\nupstream = \"http://127.0.0.1:3000/api/\"\n\n[[gateway.routes]]\npath = \"/orders/{id}\"\nmethods = [\"post\"]\nscope = [\"header:X-Tenant\"]\n\n[[sources]]\nname = \"partner\"\nhandler_url = \"http://127.0.0.1:9000/handle\"\nevent_id = \"header:Idempotency-Key\"\nsigning_secret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\n";
    let c = load(file, &[], &Overrides::default()).expect("load");
    let printed = c.to_redacted_toml();
    for effective in [
        "upstream = \"http://127.0.0.1:3000/api\"",
        "methods = [\"POST\"]",
        "lease = \"1m\"",
        "scope = [\"header:x-tenant\"]",
        "event_id = \"header:Idempotency-Key\"",
        "max_attempts = 3",
    ] {
        assert!(printed.contains(effective), "{effective} in\n{printed}");
    }
    let again = load(
        &printed.replace("\"[redacted]\"", "\"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\""),
        &[],
        &Overrides::default(),
    )
    .expect("the printed config loads");
    assert_eq!(again.to_redacted_toml(), printed);
}

#[test]
fn range_errors_name_the_field_within_its_source() {
    let file = "[[sources]]\nname = \"partner\"\nhandler_url = \"http://127.0.0.1:9000/handle\"\nevent_id = \"/id\"\nsigning_secret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\n";
    for (extra, field) in [
        ("max_attempts = 0", "sources[0].max_attempts"),
        ("concurrency = 0", "sources[0].concurrency"),
        ("backoff = []", "sources[0].backoff"),
    ] {
        let err = load(&format!("{file}{extra}\n"), &[], &Overrides::default()).unwrap_err();
        assert!(err.to_string().contains(field), "{extra}: {err}");
    }
    let err = load(&file.replace("http://127.0.0.1:9000/handle", "ftp://x"), &[], &Overrides::default()).unwrap_err();
    assert!(err.to_string().contains("sources[0].handler_url"), "{err}");
}

#[test]
fn mistakes_are_explained_in_plain_words() {
    let err = load("[limits]\nmax_body_bytes = \"big\"\n", &[], &Overrides::default()).unwrap_err().to_string();
    assert!(
        err.contains("limits.max_body_bytes") && err.contains("a whole number ≥ 0") && !err.contains("usize"),
        "{err}"
    );
    let c = load("listen = \"localhost:7272\"\n", &[], &Overrides::default()).expect("localhost works");
    assert_eq!(c.listen.to_string(), "127.0.0.1:7272");
    let err = load("listen = \"idem.internal:7070\"\n", &[], &Overrides::default()).unwrap_err().to_string();
    assert!(err.contains("listen") && err.contains("IP address"), "{err}");
    let routes = "[gateway]\nlisten = \"127.0.0.1:8080\"\nupstream = \"http://127.0.0.1:3000\"\n[[gateway.routes]]\npath = \"/orders\"\n[[gateway.routes]]\npath = \"/orders\"\nmethods = [\"PATCH\"]\n";
    let err = load(routes, &[], &Overrides::default()).unwrap_err().to_string();
    assert!(err.contains("gateway.routes[1]") && err.contains("gateway.routes[0]"), "{err}");
    assert!(
        load(&routes.replace("\"PATCH\"", "\"PUT\""), &[], &Overrides::default()).is_ok(),
        "other methods are fine"
    );
    let public = load("listen = \"0.0.0.0:7070\"\n", &[], &Overrides::default()).expect("load");
    assert!(public.check_exposure(false).is_err_and(|e| e.contains("--insecure-no-auth")));
    assert!(
        public.check_exposure(false).is_err_and(|e| e.contains("[auth] tokens") && e.contains("IDEM_AUTH__TOKENS")),
        "the file's key and the environment variable the container docs use"
    );
    assert!(public.check_exposure(true).is_ok());
    // The Redis protocol takes the same tokens: a public [resp] listen needs them too.
    let redis = load("[resp]\nlisten = \"0.0.0.0:6380\"\n", &[], &Overrides::default()).expect("load");
    assert!(redis.check_exposure(false).is_err_and(|e| e.contains("0.0.0.0:6380 ([resp] listen)")));
    assert!(redis.check_transport().is_err_and(|e| e.contains("[resp] listen = 0.0.0.0:6380")));
    let local = load("[resp]\nlisten = \"127.0.0.1:6380\"\n", &[], &Overrides::default()).expect("load");
    assert!(local.check_exposure(false).is_ok() && local.check_transport().is_ok());
}

#[test]
fn named_tokens_are_checked_and_their_secrets_never_print() {
    let source = "[[sources]]\nname = \"partner\"\nhandler_url = \"https://handler.example.com/h\"\nevent_id = \"/id\"\nsigning_secret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\n";
    let digest = idem_core::key::hex(&token_digest("bot-s3cret"));
    let good = format!(
        "{source}[auth]\ntokens = [\"admin-s3cret\"]\n[[auth.token]]\nname = \"viewer\"\ntoken = \"viewer-s3cret\"\ncan = \"read\"\n\
         [[auth.token]]\nname = \"survey-bot\"\nsha256 = \"{digest}\"\ncan = \"write\"\nnamespaces = [\"survey\"]\nsources = [\"partner\"]\n"
    );
    let c = load(&good, &[], &Overrides::default()).expect("load");
    assert!(c.auth.is_on());
    assert_eq!(c.auth.token[1].can, Can::Write);
    assert_eq!(c.auth.token[1].digest(), Some(token_digest("bot-s3cret")));
    let printed = c.to_redacted_toml();
    assert!(!printed.contains("s3cret") && !format!("{c:?}").contains("s3cret"), "{printed}");
    assert!(printed.contains(&digest), "the hash is no secret: {printed}");
    for (change, key) in [
        (("can = \"read\"", "can = \"owner\""), "auth.token[0].can"),
        (("name = \"viewer\"", "name = \"survey-bot\""), "auth.token[1].name"),
        (("name = \"viewer\"", "name = \"the viewer\""), "auth.token[0].name"),
        (("token = \"viewer-s3cret\"", "token = \"  \""), "auth.token[0].token"),
        (("token = \"viewer-s3cret\"", "token = \"bot-s3cret\""), "auth.token[1].sha256"),
        (("token = \"viewer-s3cret\"", "token = \"admin-s3cret\""), "auth.token[0].sha256"),
        (("token = \"viewer-s3cret\"", "token = \"v\"\nsha256 = \"{digest}\""), "auth.token[0].token"),
        (("sources = [\"partner\"]", "sources = [\"partnr\"]"), "auth.token[1].sources"),
        (("namespaces = [\"survey\"]", "namespaces = [\"Survey\"]"), "auth.token[1].namespaces"),
        ((&format!("sha256 = \"{digest}\""), "sha256 = \"abc\""), "auth.token[1].sha256"),
    ] {
        let text = good.replace(change.0, &change.1.replace("{digest}", &digest));
        let err = load(&text, &[], &Overrides::default()).expect_err(key).to_string();
        assert!(err.contains(key), "{key}: {err}");
        assert!(!err.contains("s3cret"), "errors never repeat a secret: {err}");
    }
    let env = [("IDEM_AUTH__TOKENS", "[\"from-env\"]")];
    let c = load("", &env, &Overrides::default()).expect("tokens from the environment");
    assert_eq!(c.auth.tokens[0].expose(), "from-env");
}

#[test]
fn tls_and_hosts_are_checked() {
    let ok = load(
        "[http]\nallowed_hosts = [\"idem.internal\", \".corp.example\"]\n[tls]\ncert = \"c.pem\"\nkey = \"k.pem\"\nca_file = \"ca.pem\"\n",
        &[],
        &Overrides::default(),
    )
    .expect("load");
    assert!(ok.tls.listener().is_some() && ok.tls.ca_file.is_some());
    for (text, key) in [
        ("[tls]\ncert = \"c.pem\"\n", "tls.key"),
        ("[tls]\nkey = \"k.pem\"\n", "tls.cert"),
        ("[tls]\nwatch_interval = \"0s\"\n", "tls.watch_interval"),
        ("[http]\nallowed_hosts = [\"http://idem.internal\"]\n", "http.allowed_hosts"),
        ("[http]\nallowed_hosts = [\"idem.internal:7070\"]\n", "http.allowed_hosts"),
    ] {
        let err = load(text, &[], &Overrides::default()).expect_err(key).to_string();
        assert!(err.contains(key), "{key}: {err}");
    }
    let public = load("listen = \"0.0.0.0:7070\"\n", &[], &Overrides::default()).expect("load");
    assert!(public.check_transport().is_err_and(|e| e.contains("terminated_by_proxy")));
    let proxied = load("listen = \"0.0.0.0:7070\"\n[tls]\nterminated_by_proxy = true\n", &[], &Overrides::default())
        .expect("load");
    assert!(proxied.check_transport().is_ok());
    assert!(Config::default().check_transport().is_ok(), "loopback needs no TLS");
}

/// `IDEM_SIGNING_SECRET` (the PHP handler's), `IDEM_TOKEN` (the clients') or any variable of
/// the user's own programs never stops idem; a likely typo of a config key is named.
#[test]
fn only_idem_variables_named_for_a_config_key_are_config() {
    let env = [
        ("IDEM_SIGNING_SECRET", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"),
        ("IDEM_TOKEN", "client-only"),
        ("IDEM_SERVER", "http://127.0.0.1:7070"),
        ("IDEM_LISTN", "127.0.0.1:9999"),
        ("IDEM_LOG__LEVEL", "warn"),
    ];
    let c = load("", &env, &Overrides::default()).expect("others' variables do not stop idem");
    assert_eq!(c.log.level, "warn", "a config variable still applies");
    assert_eq!(c.listen.port(), 7070, "a typo is not applied");
    assert_eq!(c.warnings.len(), 2, "{:?}", c.warnings);
    assert!(
        c.warnings[0].starts_with("IDEM_SIGNING_SECRET is not idem config") && !c.warnings[0].contains("Did you mean")
    );
    assert!(
        c.warnings[1].contains("IDEM_LISTN") && c.warnings[1].contains("Did you mean IDEM_LISTEN?"),
        "{:?}",
        c.warnings
    );
    assert!(!c.warnings.concat().contains("whsec_MfKQ"), "a warning never repeats a value");
}

#[test]
fn the_top_level_keys_are_the_configs() {
    let err = load("zzz = 1\n", &[], &Overrides::default()).unwrap_err().to_string();
    let expected = err.split("expected one of ").nth(1).unwrap_or_default();
    let named: Vec<&str> =
        expected.split(", ").map(|k| k.trim_matches(|c: char| c == '`' || c.is_whitespace())).collect();
    assert_eq!(named, TOP_LEVEL_KEYS, "{err}");
}

#[test]
fn every_mistake_is_listed_at_once() {
    let text =
        "listen = \"nowhere\"\n[limits]\nmax_body_bytes = 0\n[[sources]]\nname = \"p\"\nhandler_url = \"ftp://x\"\n";
    let err = load(text, &[], &Overrides::default()).unwrap_err().to_string();
    for key in [
        "`listen` (idem.toml line 1, column 1)",
        "`sources[0].handler_url` (idem.toml line 6, column 1)",
        "`sources[0]` (idem.toml line 4, column 1): missing field `event_id`",
        "`sources[0]` (idem.toml line 4, column 1): missing field `signing_secret`",
    ] {
        assert!(err.contains(key), "{key} in:\n{err}");
    }
    assert!(err.starts_with("5 mistakes in the config:\n"), "{err}");
    assert!(
        err.contains("`limits.max_body_bytes` (idem.toml line 3, column 1): must be greater than zero"),
        "validation's mistakes too:\n{err}"
    );
}

#[test]
fn secrets_never_print() {
    let c = load("[auth]\ntokens = [\"s3cret-token\"]\n", &[], &Overrides::default()).expect("load");
    assert_eq!(c.auth.tokens[0].expose(), "s3cret-token");
    assert!(!format!("{c:?}").contains("s3cret"));
    assert!(!c.to_redacted_toml().contains("s3cret"));
    assert!(c.to_redacted_toml().contains("[redacted]"));
}

#[test]
fn every_mistake_says_where_it_is_and_a_mistyped_key_what_was_meant() {
    let text = "listen = \"127.0.0.1:7070\"\n\n[[sources]]\nname = \"partner\"\nhandler_url = \"http://127.0.0.1:9000/h\"\n\
                event_id = \"/id\"\nsigning_secret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\nmax_attempt = 3\n\n\
                [[sources]]\nname = \"partner\"\nhandler_url = \"http://127.0.0.1:9000/h\"\nevent_id = \"/id\"\n\
                signing_secret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\nmax_attempts = 0\n\n[limits]\nmax_body_byte = 5\n";
    let err = load(text, &[], &Overrides::default()).unwrap_err().to_string();
    for (key, at) in [
        ("`sources[0].max_attempt`", "(idem.toml line 8, column 1)"),
        ("`limits.max_body_byte`", "(idem.toml line 18, column 1)"),
        ("`sources[1].max_attempts`", "(idem.toml line 15, column 1)"),
    ] {
        assert!(err.contains(&format!("{key} {at}")), "{key} {at} in:\n{err}");
    }
    assert!(err.contains("Did you mean `max_attempts`?"), "{err}");
    assert!(err.contains("Did you mean `max_body_bytes`?"), "{err}");
    assert!(err.contains("must be at least 1"), "a value check, in the same pass:\n{err}");
    assert!(
        err.contains("`sources[1].name` (idem.toml line 11, column 1): another source has this name"),
        "duplicate names too:\n{err}"
    );
    assert!(err.starts_with("4 mistakes in the config:\n"), "{err}");
}
