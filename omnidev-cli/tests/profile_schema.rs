//! docs/omnidev.schema.json, the JSON Schema of `omnidev.toml`, against
//! the profiles omnidev ships, reads and writes: the embedded profile,
//! every `omnidev.toml` under tests/fixtures and examples, the files
//! `omnidev init` writes, and a profile with every key the parser accepts
//! (a key added to the parser and not to the schema fails here).

use std::path::{Path, PathBuf};

use omnidev_core::{Condition, RestartPolicy};
use omnidev_pod::Profile;
use omnidev_pod::profile::{
    LanOrigins, Link, PodSection, Ready, RepoSection, Seed, Service, ServiceUrl, Url, WatchSection,
};
use serde_json::Value;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace").to_path_buf()
}

fn validator() -> jsonschema::Validator {
    let text = std::fs::read_to_string(workspace().join("docs/omnidev.schema.json"))
        .expect("read the schema");
    let schema: Value = serde_json::from_str(&text).expect("the schema is JSON");
    assert_eq!(schema["$schema"], "https://json-schema.org/draft/2020-12/schema");
    jsonschema::validator_for(&schema).expect("a valid JSON Schema")
}

/// TOML text as the JSON value the schema sees.
fn json(text: &str) -> Value {
    let value: toml::Value = toml::from_str(text).expect("TOML");
    serde_json::to_value(value).expect("JSON")
}

fn errors(validator: &jsonschema::Validator, text: &str) -> Vec<String> {
    validator.iter_errors(&json(text)).map(|e| format!("{} at {}", e, e.instance_path())).collect()
}

fn assert_valid(validator: &jsonschema::Validator, what: &str, text: &str) {
    let errors = errors(validator, text);
    assert!(errors.is_empty(), "{what}: {errors:#?}");
}

/// Every `omnidev.toml` under `dir`.
fn profiles_under(dir: &Path, found: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.map(|e| e.expect("entry")) {
        let path = entry.path();
        if entry.file_type().expect("type").is_dir() {
            profiles_under(&path, found);
        } else if path.file_name().is_some_and(|n| n == "omnidev.toml") {
            found.push(path);
        }
    }
}

#[test]
fn the_shipped_and_written_profiles_follow_the_schema() {
    let validator = validator();
    assert_valid(&validator, "embedded", omnidev_pod::profile::OMNIGENT_PROFILE);
    let mut files = Vec::new();
    for dir in ["omnidev-cli/tests/fixtures", "examples", "tests/fixtures"] {
        profiles_under(&workspace().join(dir), &mut files);
    }
    assert!(!files.is_empty(), "no omnidev.toml under the fixtures");
    for file in &files {
        let text = std::fs::read_to_string(file).expect("read");
        assert_valid(&validator, &file.display().to_string(), &text);
    }
    // What init makes of a compose file and an example dotenv file.
    let app = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        app.path().join("compose.yaml"),
        "services:\n  db:\n    image: postgres:16\n    environment: [POSTGRES_DB=app]\n",
    )
    .expect("write");
    std::fs::write(
        app.path().join(".env.example"),
        "DATABASE_URL=postgres://localhost/app\nREDIS_URL=redis://localhost/1\nSECRET=x\n",
    )
    .expect("write");
    let names = ["release", "web", "worker"].map(String::from);
    let wiring = omnidev_pod::init::wiring::Wiring::of(app.path(), &names);
    assert_eq!(wiring.databases.len(), 2, "{wiring:?}");
    let layout = omnidev_pod::init::Layout { wiring, ..omnidev_pod::init::Layout::default() };
    assert_valid(
        &validator,
        "init, generic",
        &omnidev_pod::init::generic(&omnidev_pod::init::Layout::default()),
    );
    assert_valid(&validator, "init, generic with databases", &omnidev_pod::init::generic(&layout));
    let processes = omnidev_pod::init::parse_procfile(
        "release: ./migrate\nweb: ./web --port $PORT\nworker: ./work\n",
        "Procfile".as_ref(),
    )
    .expect("parse");
    assert_valid(
        &validator,
        "init, Procfile",
        &omnidev_pod::init::from_procfile(
            &processes,
            &omnidev_pod::init::Layout {
                dotenv: true,
                python: true,
                sources: vec!["app".into()],
                ..layout
            },
        ),
    );
}

#[test]
fn unknown_keys_and_wrong_words_are_rejected() {
    let validator = validator();
    let base = "[services.web]\ncommand = [\"true\"]\n";
    assert_valid(&validator, "base", base);
    for bad in [
        "[servces.web]\ncommand = [\"true\"]\n",
        "[services.web]\ncommand = [\"true\"]\nrestart = true\n",
        "[services.web]\ncommand = [\"true\"]\nrestart = \"sometimes\"\n",
        "[services.web]\ncommand = [\"true\"]\ncomand = [\"x\"]\n",
        "[services.web]\ncommand = [\"true\"]\ndepends-on = { db = \"up\" }\n",
        "[services.web]\ncommand = [\"true\"]\nready = { tcp = \"x:1\", log = \"y\" }\n",
        "[services.web]\n",
        "[pod]\nenv-file = \".env\"\n",
        "[ports]\nweb = 70000\n",
        "[services.Web]\ncommand = [\"true\"]\n",
    ] {
        assert!(!errors(&validator, bad).is_empty(), "the schema accepts:\n{bad}");
    }
}

fn strings(values: &[&str]) -> Vec<String> {
    values.iter().map(|s| (*s).to_owned()).collect()
}

/// A profile with every field the parser knows set. The tables are struct
/// literals without `..`, so a field added to one fails to compile here
/// until it is set (and then the schema must know it).
fn everything() -> Profile {
    let ready = Ready {
        http: Some("http://127.0.0.1:{port.web}/".into()),
        host: Some("localhost".into()),
        tcp: None,
        command: None,
        log: None,
        interval_ms: Some(100),
        timeout_ms: Some(1000),
        own_listener: Some(false),
    };
    let web = Service {
        command: Some(strings(&["python3", "-m", "http.server", "{port.web}"])),
        script: None,
        args: strings(&["--bind", "127.0.0.1"]),
        cwd: Some(".".into()),
        env: [("A".to_owned(), "b".to_owned())].into_iter().collect(),
        env_files: strings(&["web.env"]),
        depends_on: [("db".to_owned(), Condition::Ready), ("cache".to_owned(), Condition::Started)]
            .into_iter()
            .collect(),
        restart: Some(RestartPolicy::OnFailure),
        stop_signal: Some("SIGINT".into()),
        grace_ms: Some(2000),
        ready: Some(ready),
        watch: strings(&["src/**"]),
        install_deps: true,
        python_deps: true,
        cwd_outside_repo: true,
        package_manager: Some("pnpm".into()),
        install_filter: Some("web...".into()),
        node_version: Some(">=22".into()),
        yields: true,
        replicas: Some(2),
        memory_max: Some(512 << 20),
        cpu_max: Some(150),
    };
    let probe = |ready: Ready| Service {
        command: Some(strings(&["true"])),
        ready: Some(ready),
        ..Service::default()
    };
    let mut profile = Profile::default();
    profile.repo = RepoSection { markers: strings(&["src"]) };
    profile.pod = PodSection {
        dirs: strings(&["data"]),
        env_files: strings(&[".env"]),
        expected_env: strings(&["SECRET_KEY"]),
        timestamps: true,
        hostnames: true,
        memory_max: Some(2 << 30),
        cpu_max: Some(200),
    };
    profile.lan_origins = Some(LanOrigins { env: "ORIGINS".into(), port: "web".into() });
    profile.links.insert("backend".into(), Link { checkout: "../backend".into() });
    profile.seed = vec![Seed { from: strings(&["{env.HOME}/a"]), to: "a".into() }];
    profile.watch = WatchSection { debounce_ms: Some(50) };
    profile.ports.insert("web".into(), 8000);
    profile.env.insert("X".into(), "y".into());
    profile.urls.insert("docs".into(), Url::Plain("http://localhost:1".into()));
    profile.urls.insert(
        "web".into(),
        Url::Service(ServiceUrl {
            url: "http://localhost:{port.web}".into(),
            service: Some("web".into()),
        }),
    );
    profile.services.insert("web".into(), web);
    profile
        .services
        .insert("db".into(), probe(Ready { tcp: Some("127.0.0.1:1".into()), ..Ready::default() }));
    profile.services.insert(
        "cache".into(),
        probe(Ready { command: Some(strings(&["true"])), ..Ready::default() }),
    );
    profile.services.insert(
        "logger".into(),
        Service {
            script: Some("dev".into()),
            restart: Some(RestartPolicy::Never),
            ready: Some(Ready { log: Some("^up$".into()), ..Ready::default() }),
            ..Service::default()
        },
    );
    profile.databases.insert(
        "main".into(),
        omnidev_pod::database::Database {
            engine: omnidev_pod::database::DbEngine::Postgres,
            scheme: Some("postgresql+psycopg".into()),
            driver: Some("psycopg[binary]>=3.1,<4".into()),
            database: Some("shop".into()),
            seed: Some(omnidev_pod::database::DbSeed {
                command: vec!["python3".into(), "seed.py".into()],
                inputs: vec!["seed.py".into()],
            }),
            ..Default::default()
        },
    );
    profile.databases.insert(
        "files".into(),
        omnidev_pod::database::Database {
            engine: omnidev_pod::database::DbEngine::Sqlite,
            path: Some("data/files.db".into()),
            engines: [(
                omnidev_pod::database::DbEngine::Mariadb,
                omnidev_pod::database::EngineChoice {
                    scheme: Some("mysql+pymysql".into()),
                    driver: Some("pymysql>=1.1,<2".into()),
                },
            )]
            .into(),
            ..Default::default()
        },
    );
    profile
}

#[test]
fn every_key_the_parser_accepts_is_in_the_schema() {
    let validator = validator();
    let text = everything().to_toml().expect("to_toml");
    // The parser takes it back, so these are keys it accepts…
    Profile::parse(&text, "everything.toml").expect("the parser accepts it");
    // …and the schema knows every one of them.
    assert_valid(&validator, "every key", &text);
    let value = json(&text);
    let mut top: Vec<&str> = value.as_object().expect("table").keys().map(String::as_str).collect();
    top.sort_unstable();
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(workspace().join("docs/omnidev.schema.json")).expect("read"),
    )
    .expect("JSON");
    let mut known: Vec<&str> =
        schema["properties"].as_object().expect("properties").keys().map(String::as_str).collect();
    known.sort_unstable();
    // Every top-level table is set, so none of them goes unchecked.
    assert_eq!(top, known, "{text}");
}
