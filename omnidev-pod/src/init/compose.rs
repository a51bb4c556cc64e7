//! The database servers a compose file runs (`postgres`, `mysql`/`mariadb`,
//! `redis` images), for `omnidev init` to give the pod its own instead.
//!
//! Only what init needs is read: each service's image, whether it builds
//! (the app itself), its environment (a list of `KEY=VALUE` or a map) and
//! its published ports; everything else in the file is ignored. Values are
//! interpolated as compose does (`${VAR:-default}`), from the variables
//! the checkout's dotenv files give.

use std::collections::BTreeMap;

use indexmap::IndexMap;
use serde::Deserialize;

use crate::database::DbEngine;

/// A compose file's services, as far as init reads them.
#[derive(Debug, Default, Deserialize)]
struct ComposeFile {
    #[serde(default)]
    services: IndexMap<String, Option<ComposeService>>,
}

#[derive(Debug, Default, Deserialize)]
struct ComposeService {
    #[serde(default)]
    image: Option<String>,
    #[serde(default)]
    build: Option<serde::de::IgnoredAny>,
    #[serde(default)]
    environment: Option<Environment>,
    #[serde(default)]
    ports: Vec<Port>,
}

/// `environment:` as a list (`- KEY=VALUE`) or a map (`KEY: VALUE`).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Environment {
    List(Vec<String>),
    Map(IndexMap<String, Option<Scalar>>),
}

/// A YAML scalar, as compose takes it for a string.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Scalar {
    Text(String),
    Whole(i64),
    Real(f64),
    Flag(bool),
}

impl Scalar {
    fn text(&self) -> String {
        match self {
            Scalar::Text(text) => text.clone(),
            Scalar::Whole(n) => n.to_string(),
            Scalar::Real(x) => x.to_string(),
            Scalar::Flag(b) => b.to_string(),
        }
    }
}

/// `ports:`: `"5433:5432"`, `5432`, or `{ target: 5432, published: 5433 }`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Port {
    Short(Scalar),
    Long {
        #[serde(default)]
        published: Option<Scalar>,
    },
}

impl Port {
    /// The port on the host, when one is published.
    fn published(&self) -> Option<u16> {
        let text = match self {
            Port::Short(scalar) => {
                let text = scalar.text();
                let mapping = text.split('/').next().unwrap_or_default().to_owned();
                let fields: Vec<&str> = mapping.rsplitn(3, ':').collect();
                // `[IP:]HOST:CONTAINER`: the host port is second from the end.
                (*fields.get(1)?).to_owned()
            }
            Port::Long { published } => published.as_ref()?.text(),
        };
        text.parse().ok()
    }
}

/// A database server a compose file runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ComposeDb {
    /// Its compose service name (the host name the app reaches it by).
    pub service: String,
    /// Its image.
    pub image: String,
    /// The engine the image runs.
    pub engine: DbEngine,
    /// The database it makes (`POSTGRES_DB`, `MYSQL_DATABASE`,
    /// `MARIADB_DATABASE`).
    pub database: Option<String>,
    /// The variables of its environment init does not take (the image's
    /// user and password: the pod's server has its own).
    pub not_taken: Vec<String>,
    /// The ports it publishes on the host.
    pub published: Vec<u16>,
}

/// What init takes from a compose file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Compose {
    /// Its database servers.
    pub databases: Vec<ComposeDb>,
    /// The environment of its other services (the app's own, `build:`),
    /// whose URLs of those servers init points at the pod's.
    pub app_env: Vec<(String, String)>,
    /// Each other service and why init does not take it.
    pub skipped: Vec<(String, String)>,
}

/// The engine an image runs: `postgres:16`, `docker.io/library/redis:7`,
/// `bitnami/postgresql`, `mariadb:11`, `valkey/valkey:8`.
///
/// ```
/// use omnidev_pod::database::DbEngine;
/// use omnidev_pod::init::compose::engine_of_image;
/// assert_eq!(engine_of_image("postgres:16-alpine"), Some(DbEngine::Postgres));
/// assert_eq!(engine_of_image("docker.io/library/redis:7@sha256:ab"), Some(DbEngine::Redis));
/// assert_eq!(engine_of_image("mysql:8"), Some(DbEngine::Mariadb));
/// assert_eq!(engine_of_image("postgis/postgis:16-3.4"), None);
/// ```
pub fn engine_of_image(image: &str) -> Option<DbEngine> {
    let name = image.split('@').next().unwrap_or_default();
    let last = name.rsplit('/').next().unwrap_or_default();
    let repository = last.split(':').next().unwrap_or_default();
    match repository {
        "postgres" | "postgresql" => Some(DbEngine::Postgres),
        "mysql" | "mariadb" => Some(DbEngine::Mariadb),
        "redis" | "valkey" => Some(DbEngine::Redis),
        _ => None,
    }
}

/// Reads compose file `text` (named `file` in errors); `vars` are the
/// values `${VAR}` takes.
pub fn parse(text: &str, vars: &BTreeMap<String, String>) -> Result<Compose, String> {
    // The parser's first line says what and where; the rest is a snippet.
    let file: ComposeFile = serde_saphyr::from_str(text).map_err(|e| {
        let said = e.to_string();
        let first = said.lines().next().unwrap_or_default();
        first.strip_prefix("error: ").unwrap_or(first).to_owned()
    })?;
    let mut compose = Compose::default();
    for (name, service) in file.services {
        let service = service.unwrap_or_default();
        let env: Vec<(String, String)> = match &service.environment {
            None => Vec::new(),
            Some(Environment::List(items)) => items
                .iter()
                .filter_map(|item| {
                    let (key, value) = item.split_once('=')?;
                    Some((key.trim().to_owned(), interpolate(value, vars)))
                })
                .collect(),
            Some(Environment::Map(map)) => map
                .iter()
                .map(|(key, value)| {
                    let value = value.as_ref().map(Scalar::text).unwrap_or_default();
                    (key.clone(), interpolate(&value, vars))
                })
                .collect(),
        };
        let image = service.image.as_deref().map(|i| interpolate(i, vars));
        let engine = image.as_deref().and_then(engine_of_image);
        match (engine, image) {
            (Some(engine), Some(image)) if service.build.is_none() => {
                let made = match engine {
                    DbEngine::Postgres => &["POSTGRES_DB"][..],
                    DbEngine::Mariadb => &["MARIADB_DATABASE", "MYSQL_DATABASE"][..],
                    DbEngine::Redis | DbEngine::Sqlite => &[][..],
                };
                let database = (env.iter())
                    .find(|(key, value)| made.contains(&key.as_str()) && !value.is_empty())
                    .map(|(_, value)| value.clone());
                let not_taken = (env.iter())
                    .filter(|(key, _)| !made.contains(&key.as_str()))
                    .map(|(key, _)| key.clone())
                    .collect();
                compose.databases.push(ComposeDb {
                    service: name,
                    image,
                    engine,
                    database,
                    not_taken,
                    published: service.ports.iter().filter_map(Port::published).collect(),
                });
            }
            (_, image) => {
                let why = if service.build.is_some() {
                    "builds the app: run it from the Procfile or a [services] table".to_owned()
                } else {
                    format!(
                        "image {}: no engine omnidev runs (postgres, mysql/mariadb, redis)",
                        image.as_deref().map_or_else(|| "(none)".to_owned(), said)
                    )
                };
                compose.app_env.extend(env);
                compose.skipped.push((name, why));
            }
        }
    }
    Ok(compose)
}

/// A name or image from a compose file as a note or a profile comment
/// may hold it: as it is when it is plain (printable ASCII, no space, at
/// most 64 bytes), else quoted and escaped, so no line break or control
/// of a file ends up in the profile or the terminal.
pub(crate) fn said(text: &str) -> String {
    if text.len() <= 64 && text.bytes().all(|b| b.is_ascii_graphic()) {
        text.to_owned()
    } else {
        crate::names::shown(text)
    }
}

/// `text` with compose's interpolation applied: `$$` is `$`; `${VAR}`,
/// `$VAR`, `${VAR:-default}` (unset or empty), `${VAR-default}` (unset),
/// `${VAR:?message}` and `${VAR?message}` (empty here) take `vars`.
///
/// ```
/// use std::collections::BTreeMap;
/// use omnidev_pod::init::compose::interpolate;
/// let vars = BTreeMap::from([("USER".to_owned(), "ada".to_owned()), ("EMPTY".to_owned(), String::new())]);
/// assert_eq!(interpolate("${DB:-app}_${USER}$$ $USER", &vars), "app_ada$ ada");
/// assert_eq!(interpolate("${EMPTY:-x}/${EMPTY-y}/${NONE-z}", &vars), "x//z");
/// ```
pub fn interpolate(text: &str, vars: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        rest = &rest[at + 1..];
        if let Some(after) = rest.strip_prefix('$') {
            out.push('$');
            rest = after;
        } else if let Some(inner) = rest.strip_prefix('{') {
            let Some(end) = inner.find('}') else {
                out.push_str("${");
                rest = inner;
                continue;
            };
            out.push_str(&braced(&inner[..end], vars));
            rest = &inner[end + 1..];
        } else {
            let end =
                rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(rest.len());
            if end == 0 {
                out.push('$');
            } else {
                out.push_str(vars.get(&rest[..end]).map_or("", String::as_str));
            }
            rest = &rest[end..];
        }
    }
    out.push_str(rest);
    out
}

/// The value of `${inner}`.
fn braced(inner: &str, vars: &BTreeMap<String, String>) -> String {
    let end = inner.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(inner.len());
    let (name, operator) = inner.split_at(end);
    let value = vars.get(name);
    let (if_empty, default) = if let Some(default) = operator.strip_prefix(":-") {
        (true, default)
    } else if let Some(default) = operator.strip_prefix('-') {
        (false, default)
    } else {
        (false, "")
    };
    match value {
        Some(value) if !(if_empty && value.is_empty()) => value.clone(),
        _ => default.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn environment_as_a_list_and_as_a_map_ports_short_and_long() {
        let text = r#"
services:
  web:
    build: .
    environment:
      - DATABASE_URL=postgres://app:secret@db:5432/${DB_NAME:-app_dev}
    depends_on: [db, cache]
  db:
    image: "postgres:16"
    environment:
      POSTGRES_DB: ${DB_NAME:-app_dev}
      POSTGRES_USER: app
      POSTGRES_PASSWORD: secret
    ports: ["127.0.0.1:5433:5432/tcp"]
    healthcheck:
      test: ["CMD", "pg_isready"]
  cache:
    image: redis:7-alpine
    ports:
      - target: 6379
        published: 6380
  queue:
    image: rabbitmq:3
volumes:
  data: {}
"#;
        let compose = parse(text, &BTreeMap::new()).expect("parse");
        assert_eq!(compose.databases.len(), 2);
        let db = &compose.databases[0];
        assert_eq!(
            (db.service.as_str(), db.engine, db.database.as_deref()),
            ("db", DbEngine::Postgres, Some("app_dev"))
        );
        assert_eq!(db.not_taken, ["POSTGRES_USER", "POSTGRES_PASSWORD"]);
        assert_eq!(db.published, [5433]);
        let cache = &compose.databases[1];
        assert_eq!((cache.engine, cache.published.as_slice()), (DbEngine::Redis, &[6380][..]));
        assert_eq!(
            compose.app_env,
            [("DATABASE_URL".to_owned(), "postgres://app:secret@db:5432/app_dev".to_owned())]
        );
        let skipped: Vec<&str> = compose.skipped.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(skipped, ["web", "queue"]);
        assert!(compose.skipped[1].1.contains("rabbitmq:3"), "{:?}", compose.skipped);
    }

    #[test]
    fn interpolation_takes_the_dotenv_values() {
        let vars = BTreeMap::from([("PG".to_owned(), "16".to_owned())]);
        let text = "services:\n  db:\n    image: postgres:${PG}\n    environment:\n      - POSTGRES_DB=$${literal}\n";
        let compose = parse(text, &vars).expect("parse");
        assert_eq!(compose.databases[0].image, "postgres:16");
        assert_eq!(compose.databases[0].database.as_deref(), Some("${literal}"));
    }

    #[test]
    fn a_file_that_is_no_compose_file_is_an_error_and_an_alias_bomb_is_refused() {
        assert!(parse("services: [1, 2]\n", &BTreeMap::new()).is_err());
        assert!(parse("services:\n  a: {image: [\n", &BTreeMap::new()).is_err());
        let mut bomb =
            String::from("a: &a [\"x\", \"x\", \"x\", \"x\", \"x\", \"x\", \"x\", \"x\"]\n");
        for level in 1..12 {
            let _ = std::fmt::Write::write_fmt(
                &mut bomb,
                format_args!(
                    "{}: &{} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n",
                    (b'a' + level) as char,
                    (b'a' + level) as char,
                    p = (b'a' + level - 1) as char
                ),
            );
        }
        bomb.push_str("services: {}\n");
        let refused = parse(&bomb, &BTreeMap::new()).expect_err("a bomb");
        assert!(refused.contains("alias") || refused.contains("budget"), "{refused}");
    }
}
