//! What `omnidev init` makes of an app's databases: the servers its
//! compose file runs and the URLs its `.env.example` (and `.env`, and the
//! compose file's own app services) name become databases of the pod's own
//! and variables pointed at them; the example's other variables become the
//! profile's `expected-env`, their example values written as comments.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use super::app_json::AppJson;
use super::compose::{self, Compose, said};
use crate::database::DbEngine;

/// The compose files init reads, the first found.
pub const COMPOSE_FILES: &[&str] =
    &["compose.yaml", "compose.yml", "docker-compose.yaml", "docker-compose.yml"];

/// The example dotenv files init reads, the first found.
pub const EXAMPLE_FILES: &[&str] = &[".env.example", ".env.sample"];

/// Heroku's manifest: the add-ons an app deploys on.
pub const APP_JSON: &str = "app.json";

/// The most bytes of a compose or dotenv file read.
const MAX_BYTES: u64 = 1024 * 1024;

/// Variables omnidev sets itself, never expected of the user.
const OWN: &[&str] = &["PORT"];

/// A database the pod gets in place of the app's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodDb {
    /// Its name in the profile (`[databases.NAME]`).
    pub name: String,
    /// Its engine.
    pub engine: DbEngine,
    /// The database its server makes (Postgres, MariaDB).
    pub database: Option<String>,
    /// Where it comes from, for the comment above it.
    pub from: String,
    /// Its compose service's name, when it has one.
    service: Option<String>,
    /// The ports its compose service publishes.
    published: Vec<u16>,
}

/// What init makes of the checkout's databases and variables.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Wiring {
    /// The pod's databases, in the order found.
    pub databases: Vec<PodDb>,
    /// Variables pointed at them: name, profile template.
    pub env: Vec<(String, String)>,
    /// The example's other variables: name, example value.
    pub expected: Vec<(String, String)>,
    /// An example dotenv file was read (so `.env`, a copy of it, is
    /// loaded for every service).
    pub example: bool,
    /// What was taken and what was not, a line each.
    pub notes: Vec<String>,
}

/// What init reads of a checkout.
struct Sources {
    /// The example dotenv file's pairs, and its name (empty when none).
    example: Vec<(String, String)>,
    example_name: &'static str,
    /// `.env`'s pairs.
    dotenv: Vec<(String, String)>,
    /// What compose's `${VAR}` takes.
    vars: BTreeMap<String, String>,
    /// The compose file, and its name (empty when none).
    compose: Compose,
    compose_name: &'static str,
    /// `app.json`'s add-ons and variables.
    app: AppJson,
}

impl Sources {
    /// Reads `repo`'s files; what cannot be read is a note.
    fn read(repo: &Path, notes: &mut Vec<String>) -> Self {
        let mut first = |names: &[&'static str]| {
            for name in names {
                match read(repo, name) {
                    Ok(Some(text)) => return Some((*name, text)),
                    Ok(None) => {}
                    Err(note) => notes.push(note),
                }
            }
            None
        };
        let (example_name, example) =
            first(EXAMPLE_FILES).map(|(name, text)| (name, read_dotenv(&text))).unwrap_or_default();
        let dotenv = first(&[".env"]).map(|(_, text)| read_dotenv(&text)).unwrap_or_default();
        let compose_file = first(COMPOSE_FILES);
        let app_file = first(&[APP_JSON]);
        // Compose interpolates from `.env`; an example stands in for it.
        let vars: BTreeMap<String, String> = example.iter().chain(&dotenv).cloned().collect();
        let (compose_name, compose) = match compose_file {
            Some((name, text)) => match compose::parse(&text, &vars) {
                Ok(parsed) => (name, parsed),
                Err(e) => {
                    notes.push(format!("{name}: not read: {e}"));
                    (name, Compose::default())
                }
            },
            None => ("", Compose::default()),
        };
        let app = match app_file.map(|(_, text)| super::app_json::parse(&text)) {
            Some(Ok(app)) => app,
            Some(Err(e)) => {
                notes.push(format!("{APP_JSON}: not read: {e}"));
                AppJson::default()
            }
            None => AppJson::default(),
        };
        Sources { example, example_name, dotenv, vars, compose, compose_name, app }
    }
}

/// A URL of a database engine, split.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DbUrl {
    /// Its scheme, as written (`postgresql+psycopg`).
    pub scheme: String,
    /// The engine the scheme names.
    pub engine: DbEngine,
    /// Its host (without brackets).
    pub host: String,
    /// Its port.
    pub port: Option<u16>,
    /// Its path, without the leading `/`.
    pub path: String,
    /// Its query, without the `?`.
    pub query: String,
}

/// Splits `value` when it is a URL of a server engine: `postgres://`,
/// `postgresql+asyncpg://`, `mysql+pymysql://`, `mariadb://`, `redis://`.
///
/// ```
/// use omnidev_pod::init::wiring::parse_url;
/// use omnidev_pod::database::DbEngine;
/// let url = parse_url("redis://:pw@localhost:6379/2").unwrap();
/// assert_eq!((url.engine, url.host.as_str(), url.port, url.path.as_str()), (DbEngine::Redis, "localhost", Some(6379), "2"));
/// let url = parse_url("postgresql+psycopg://app:x@[::1]/app_dev?sslmode=disable").unwrap();
/// assert_eq!((url.host.as_str(), url.port, url.query.as_str()), ("::1", None, "sslmode=disable"));
/// assert!(parse_url("https://example.com/").is_none());
/// ```
pub fn parse_url(value: &str) -> Option<DbUrl> {
    let (scheme, rest) = value.trim().split_once("://")?;
    let engine = match scheme.split('+').next()?.to_ascii_lowercase().as_str() {
        "postgres" | "postgresql" => DbEngine::Postgres,
        "mysql" | "mariadb" => DbEngine::Mariadb,
        "redis" => DbEngine::Redis,
        _ => return None,
    };
    let rest = rest.split('#').next().unwrap_or_default();
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let address = authority.rsplit('@').next().unwrap_or_default();
    let (host, port) = if let Some(bracketed) = address.strip_prefix('[') {
        let (host, after) = bracketed.split_once(']')?;
        (host, after.strip_prefix(':'))
    } else {
        match address.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (address, None),
        }
    };
    let port = match port {
        Some(port) if !port.is_empty() => Some(port.parse().ok()?),
        _ => None,
    };
    let (path, query) = tail.split_once('?').unwrap_or((tail, ""));
    Some(DbUrl {
        scheme: scheme.to_owned(),
        engine,
        host: host.to_owned(),
        port,
        path: path.trim_start_matches('/').to_owned(),
        query: query.to_owned(),
    })
}

/// Whether `host` is this machine, as a URL in an example names it.
fn is_local(host: &str) -> bool {
    matches!(
        host.to_ascii_lowercase().as_str(),
        "" | "localhost" | "127.0.0.1" | "::1" | "0.0.0.0" | "host.docker.internal"
    )
}

/// Reads a dotenv file leniently (an example is not run: `${VAR}` and
/// odd lines are kept or skipped, never an error): `KEY=VALUE` pairs in
/// order, `export ` dropped, quotes removed, `#` comments cut.
///
/// ```
/// use omnidev_pod::init::wiring::read_dotenv;
/// let pairs = read_dotenv("# app\nexport A=1 # one\nB=\"x # y\"\nC='${D}'\nnot a line\n");
/// assert_eq!(pairs, [("A".into(), "1".into()), ("B".into(), "x # y".into()), ("C".into(), "${D}".into())]);
/// ```
pub fn read_dotenv(text: &str) -> Vec<(String, String)> {
    let mut pairs = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        let line = line.strip_prefix("export ").unwrap_or(line);
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let key = key.trim();
        if !crate::env_file::is_key(key) {
            continue;
        }
        let value = value.trim();
        let value = if let Some(quote @ ('"' | '\'')) = value.chars().next() {
            let inner = &value[1..];
            inner.find(quote).map_or(inner, |end| &inner[..end])
        } else {
            let bytes = value.as_bytes();
            let cut = (0..bytes.len())
                .find(|&i| bytes[i] == b'#' && (i == 0 || bytes[i - 1].is_ascii_whitespace()))
                .unwrap_or(bytes.len());
            value[..cut].trim_end()
        };
        pairs.push((key.to_owned(), value.to_owned()));
    }
    pairs
}

/// A file of the checkout, read whole when it is there: `Ok(None)` when it
/// is not, an error line when it cannot be read as text.
fn read(repo: &Path, name: &str) -> Result<Option<String>, String> {
    let path = repo.join(name);
    match omnidev_core::fs::read_linked(&path, MAX_BYTES) {
        Ok(None) => Ok(None),
        Ok(Some(bytes)) => String::from_utf8(bytes)
            .map(Some)
            .map_err(|_| format!("{name}: not read: it is not UTF-8 text")),
        Err(e) => Err(format!("{name}: not read: {e}")),
    }
}

impl Wiring {
    /// What init makes of `repo`'s compose file and dotenv files; `taken`
    /// are the names the profile gives services and ports already.
    pub fn of(repo: &Path, taken: &[String]) -> Self {
        let mut wiring = Wiring::default();
        let found = Sources::read(repo, &mut wiring.notes);
        let (example, example_name) = (&found.example, found.example_name);
        let (compose, compose_name) = (&found.compose, found.compose_name);
        let (dotenv, vars) = (&found.dotenv, &found.vars);
        wiring.example = !example_name.is_empty();
        let mut names: Vec<String> = taken.to_vec();
        wiring.take_compose(compose, compose_name, &mut names);
        // The URLs: the example's, then `.env`'s, then the compose app's.
        let sources = (example.iter().map(|pair| (example_name, pair)))
            .chain(dotenv.iter().map(|pair| (".env", pair)))
            .chain(compose.app_env.iter().map(|pair| (compose_name, pair)));
        let mut pointed: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for (file, (key, value)) in sources.clone() {
            if !crate::env_file::is_key(key) || wiring.env.iter().any(|(k, _)| k == key) {
                continue;
            }
            let value = compose::interpolate(value, vars);
            let Some(url) = parse_url(&value) else {
                continue;
            };
            match wiring.database_for(&url, &mut names) {
                Some(index) => {
                    let template = wiring.point(index, &url, key);
                    wiring.env.push((key.clone(), template));
                    pointed.entry(file).or_default().push(key.clone());
                }
                None => wiring.notes.push(format!(
                    "{file}: {key} not taken: it names {}, not this machine nor a \
                     database of {}",
                    shown_host(&url.host),
                    if compose_name.is_empty() { "a compose file" } else { compose_name }
                )),
            }
        }
        // Addresses given in parts (`POSTGRES_HOST`, `REDIS_PORT`, `PGUSER`).
        let pairs: Vec<(&str, &(String, String))> =
            sources.filter(|(_, (key, _))| crate::env_file::is_key(key)).collect();
        for (file, key) in wiring.point_parts(&pairs, vars, &mut names) {
            pointed.entry(file).or_default().push(key);
        }
        // The databases the app deploys on (Heroku's add-ons), when no
        // file above named their variables.
        for (engine, key) in &found.app.addons {
            if wiring.env.iter().any(|(k, _)| k == key) {
                continue;
            }
            let address = DbUrl {
                scheme: engine.scheme().to_owned(),
                engine: *engine,
                host: "localhost".to_owned(),
                port: None,
                path: String::new(),
                query: String::new(),
            };
            if let Some(index) = wiring.database_for(&address, &mut names) {
                let name = &wiring.databases[index].name;
                wiring.env.push((key.clone(), format!("{{db.{name}.url}}")));
                pointed.entry(APP_JSON).or_default().push(key.clone());
            }
        }
        for (file, keys) in pointed {
            wiring.notes.push(format!("{file}: {} pointed at the pod's own", keys.join(", ")));
        }
        wiring.expect_the_rest(&[(example_name, example), (APP_JSON, &found.app.env)]);
        wiring
    }

    /// Takes the database servers of compose file `compose_name` as the
    /// pod's own, and says what of it is not taken.
    fn take_compose(&mut self, compose: &Compose, compose_name: &str, names: &mut Vec<String>) {
        for db in &compose.databases {
            let name = free_name(&db.service, db.engine, names);
            names.push(name.clone());
            let from = format!("{} ({})", said(&db.service), said(&db.image));
            self.notes.push(format!(
                "{compose_name}: {from} runs as [databases.{name}], a {} of the pod's own",
                db.engine.word()
            ));
            if !db.not_taken.is_empty() {
                let keys: Vec<String> = db.not_taken.iter().map(|k| said(k)).collect();
                self.notes.push(format!(
                    "{compose_name}: {} of {} not taken: the pod's server has its own user",
                    keys.join(", "),
                    said(&db.service)
                ));
            }
            self.databases.push(PodDb {
                name,
                engine: db.engine,
                database: db.database.clone().filter(|d| is_database_name(d)),
                from: format!("{from} of {compose_name}"),
                service: Some(db.service.clone()),
                published: db.published.clone(),
            });
        }
        for (service, why) in &compose.skipped {
            self.notes.push(format!("{compose_name}: {} not taken: {why}", said(service)));
        }
    }

    /// Lists the variables of `files` (name, pairs) nothing set as
    /// expected.
    fn expect_the_rest(&mut self, files: &[(&str, &Vec<(String, String)>)]) {
        let set = |key: &str| OWN.contains(&key) || self.env.iter().any(|(k, _)| k == key);
        let mut expected: Vec<(String, String)> = Vec::new();
        for (file, pairs) in files {
            let new: Vec<(String, String)> = (pairs.iter())
                .filter(|(key, _)| crate::env_file::is_key(key) && !set(key))
                .filter(|(key, _)| !expected.iter().any(|(k, _)| k == key))
                .cloned()
                .collect();
            if !new.is_empty() {
                let keys: Vec<&str> = new.iter().map(|(k, _)| k.as_str()).collect();
                self.notes.push(format!(
                    "{file}: {} not known to omnidev: in [pod] expected-env \
                         (`omnidev profile check` names those unset)",
                    keys.join(", ")
                ));
            }
            expected.extend(new);
        }
        self.expected = expected;
    }

    /// The pod database `url` is pointed at, added when it is the first
    /// of its engine on this machine and no compose service runs one.
    fn database_for(&mut self, url: &DbUrl, names: &mut Vec<String>) -> Option<usize> {
        let same = |db: &PodDb| db.engine == url.engine;
        if let Some(index) = (self.databases.iter())
            .position(|db| same(db) && db.service.as_deref() == Some(url.host.as_str()))
        {
            return Some(index);
        }
        if !is_local(&url.host) {
            return None;
        }
        let by_port = (self.databases.iter())
            .position(|db| same(db) && url.port.is_some_and(|p| db.published.contains(&p)));
        if let Some(index) = by_port.or_else(|| self.databases.iter().position(same)) {
            return Some(index);
        }
        let name = free_name(url.engine.word(), url.engine, names);
        names.push(name.clone());
        self.databases.push(PodDb {
            name,
            engine: url.engine,
            database: None,
            from: format!("the {} URLs below", url.engine.word()),
            service: None,
            published: Vec::new(),
        });
        Some(self.databases.len() - 1)
    }

    /// The template of a URL like `url` that reaches pod database `index`:
    /// its scheme, database (or number) and query kept.
    fn point(&mut self, index: usize, url: &DbUrl, key: &str) -> String {
        let db = &mut self.databases[index];
        let name = db.name.clone();
        // The URL's own connection parameters give way to the pod's.
        let query: Vec<&str> = (url.query.split('&'))
            .filter(|pair| !pair.is_empty())
            .filter(|pair| {
                let key = pair.split('=').next().unwrap_or_default();
                !["host", "port", "user", "password", "unix_socket", "socket"].contains(&key)
            })
            .collect();
        let extra = super::literal(&query.join("&"));
        if db.engine == DbEngine::Redis {
            let number = Some(url.path.as_str())
                .filter(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
                .unwrap_or("0");
            let query = if extra.is_empty() { String::new() } else { format!("?{extra}") };
            return format!("{}://{{db.{name}.authority}}/{number}{query}", url.scheme);
        }
        if db.database.is_none() && is_database_name(&url.path) {
            db.database = Some(url.path.clone());
        }
        let database = match (url.path.as_str(), &db.database) {
            ("", Some(made)) => made.clone(),
            ("", None) => name.clone(),
            (path, made) => {
                if made.as_deref().is_some_and(|m| m != path) {
                    self.notes.push(format!(
                        "{key} names database {path}, which the pod's server does not \
                         make (it makes {}): the app's tools create it",
                        made.as_deref().unwrap_or_default()
                    ));
                }
                super::literal(path)
            }
        };
        let extra = if extra.is_empty() { String::new() } else { format!("&{extra}") };
        format!("{}://{{db.{name}.authority}}/{database}?{{db.{name}.query}}{extra}", url.scheme)
    }

    /// Points the variables that give a database's address in parts at
    /// the pod's own: a group of one prefix (`POSTGRES_`, `PG`, `DB_`,
    /// `REDIS_`) whose host (`_HOST`, `_SERVER`) is this machine or a
    /// compose service of its engine gets the pod database's host, port,
    /// TCP user and password; its database name is the one the server
    /// makes when none is set. Returns the variables taken, with their
    /// files.
    fn point_parts<'f>(
        &mut self,
        pairs: &[(&'f str, &(String, String))],
        vars: &BTreeMap<String, String>,
        names: &mut Vec<String>,
    ) -> Vec<(&'f str, String)> {
        let mut taken = Vec::new();
        let hosts: Vec<(&str, &str, String)> = (pairs.iter())
            .filter_map(|(file, (key, value))| match address_part(key) {
                Some((prefix, Part::Host)) => {
                    Some((*file, prefix, compose::interpolate(value, vars)))
                }
                _ => None,
            })
            .collect();
        for (_, prefix, host) in hosts {
            let Some(engine) = prefix_engine(prefix).or_else(|| self.generic_engine(&host)) else {
                continue;
            };
            let group: Vec<(&str, &String, &String, Part)> = (pairs.iter())
                .filter_map(|(file, (key, value))| {
                    let (p, part) = address_part(key)?;
                    (p == prefix).then_some((*file, key, value, part))
                })
                .collect();
            let port = (group.iter())
                .find(|(.., part)| *part == Part::Port)
                .and_then(|(_, _, value, _)| compose::interpolate(value, vars).parse().ok());
            let address = DbUrl {
                scheme: engine.scheme().to_owned(),
                engine,
                host: host.clone(),
                port,
                path: String::new(),
                query: String::new(),
            };
            let Some(index) = self.database_for(&address, names) else {
                continue;
            };
            let name = self.databases[index].name.clone();
            for (file, key, value, part) in group {
                if self.env.iter().any(|(k, _)| k == key) {
                    continue;
                }
                let template = match (part, engine) {
                    (Part::Host, _) => format!("{{db.{name}.host}}"),
                    (Part::Port, _) => format!("{{db.{name}.port}}"),
                    (Part::Password, _) => format!("{{db.{name}.password}}"),
                    (Part::User, DbEngine::Postgres | DbEngine::Mariadb) => {
                        crate::database::USER.to_owned()
                    }
                    (Part::Database, DbEngine::Postgres | DbEngine::Mariadb) => {
                        let value = compose::interpolate(value, vars);
                        let db = &mut self.databases[index];
                        if db.database.is_none() && is_database_name(&value) {
                            db.database = Some(value.clone());
                        }
                        super::literal(&value)
                    }
                    _ => continue,
                };
                self.env.push((key.clone(), template));
                taken.push((file, key.clone()));
            }
        }
        taken
    }

    /// The engine a `DB_HOST` means: the engine of the compose service it
    /// names, else that of the one SQL database so far.
    fn generic_engine(&self, host: &str) -> Option<DbEngine> {
        if let Some(db) = (self.databases.iter()).find(|db| db.service.as_deref() == Some(host)) {
            return Some(db.engine);
        }
        let mut sql = (self.databases.iter()).filter(|db| db.engine.names_databases());
        match (sql.next(), sql.next()) {
            (Some(only), None) => Some(only.engine),
            _ => None,
        }
    }

    /// The `[databases.*]` tables, each with a comment saying where it
    /// comes from.
    pub fn database_tables(&self) -> String {
        let mut text = String::new();
        for db in &self.databases {
            let _ = write!(
                text,
                "\n# In place of {}: a {} of the pod's own\n\
                 # (its data in the pod; `omnidev db {}` opens its shell).\n\
                 [databases.{}]\nengine = \"{}\"\n",
                db.from,
                db.engine.word(),
                db.name,
                db.name,
                db.engine.word()
            );
            if let Some(database) = &db.database {
                let _ = writeln!(text, "database = \"{database}\"");
            }
        }
        text
    }
}

/// A part of a database's address a variable may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    Host,
    Port,
    User,
    Password,
    Database,
}

/// The prefix and the address part a variable's name gives:
/// `POSTGRES_HOST` is (`POSTGRES`, host), `PGPORT` (`PG`, port),
/// `REDIS_PASSWORD` (`REDIS`, password).
fn address_part(key: &str) -> Option<(&str, Part)> {
    const SUFFIXES: &[(&str, Part)] = &[
        ("HOST", Part::Host),
        ("HOSTNAME", Part::Host),
        ("SERVER", Part::Host),
        ("PORT", Part::Port),
        ("USER", Part::User),
        ("USERNAME", Part::User),
        ("PASSWORD", Part::Password),
        ("PASS", Part::Password),
        ("DB", Part::Database),
        ("NAME", Part::Database),
        ("DATABASE", Part::Database),
    ];
    if let Some(rest) = key.strip_prefix("PG") {
        let part = match rest {
            "HOST" => Part::Host,
            "PORT" => Part::Port,
            "USER" => Part::User,
            "PASSWORD" => Part::Password,
            "DATABASE" => Part::Database,
            _ => return address_part_of(key, SUFFIXES),
        };
        return Some(("PG", part));
    }
    address_part_of(key, SUFFIXES)
}

fn address_part_of<'k>(key: &'k str, suffixes: &[(&str, Part)]) -> Option<(&'k str, Part)> {
    let (prefix, suffix) = key.rsplit_once('_')?;
    let part = suffixes.iter().find(|(s, _)| *s == suffix)?.1;
    prefix_known(prefix).then_some((prefix, part))
}

/// Whether `prefix` names a database (an engine's, or `DB`, `DATABASE`).
fn prefix_known(prefix: &str) -> bool {
    prefix_engine(prefix).is_some() || matches!(prefix, "DB" | "DATABASE" | "SQL")
}

/// The engine a prefix names.
fn prefix_engine(prefix: &str) -> Option<DbEngine> {
    match prefix {
        "POSTGRES" | "POSTGRESQL" | "PG" | "PSQL" => Some(DbEngine::Postgres),
        "MYSQL" | "MARIADB" => Some(DbEngine::Mariadb),
        "REDIS" | "VALKEY" => Some(DbEngine::Redis),
        _ => None,
    }
}

/// Whether a server can be asked to make database `name` as it is
/// (the profile's `database` rule).
fn is_database_name(name: &str) -> bool {
    (1..=63).contains(&name.len())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || "_-".contains(c))
}

/// A profile name for a database from `wanted` (a compose service's name
/// or an engine's word) that no service, port or database has.
fn free_name(wanted: &str, engine: DbEngine, taken: &[String]) -> String {
    let mut name: String = (wanted.to_ascii_lowercase().chars())
        .map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '-' })
        .collect();
    name = name.trim_start_matches(['_', '-']).chars().take(28).collect();
    if name.is_empty() {
        engine.word().clone_into(&mut name);
    }
    let base = name.clone();
    let mut n = 2;
    while taken.contains(&name) {
        name = format!("{base}-{n}");
        n += 1;
    }
    name
}

/// A host for a note: printable, or said to be odd.
fn shown_host(host: &str) -> String {
    crate::names::shown(host)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wiring(files: &[(&str, &str)], taken: &[&str]) -> Wiring {
        let dir = tempfile::tempdir().expect("tempdir");
        for (name, text) in files {
            std::fs::write(dir.path().join(name), text).expect("write");
        }
        let taken: Vec<String> = taken.iter().map(|s| (*s).to_owned()).collect();
        Wiring::of(dir.path(), &taken)
    }

    #[test]
    fn urls_of_the_compose_servers_point_at_the_pods_keeping_path_number_and_query() {
        let w = wiring(
            &[
                (
                    "compose.yaml",
                    "services:\n  db:\n    image: postgres:16\n    environment:\n      \
                     POSTGRES_DB: shop\n      POSTGRES_PASSWORD: pw\n  redis:\n    image: redis:7\n",
                ),
                (
                    ".env.example",
                    "DATABASE_URL=postgresql+psycopg://shop:pw@db:5432/shop?sslmode=disable\n\
                     TEST_DATABASE_URL=postgres://localhost/shop_test\n\
                     REDIS_URL=redis://localhost:6379\n\
                     CELERY_BROKER_URL='redis://:secret@redis:6379/1'\n\
                     RATELIMIT_STORAGE_URI=\"redis://127.0.0.1:6379/2\"\n\
                     SECRET_KEY=change-me\nPORT=5000\n\
                     SENTRY_DSN=https://key@sentry.io/1\n",
                ),
            ],
            &["web", "worker"],
        );
        let names: Vec<(&str, DbEngine, Option<&str>)> = (w.databases.iter())
            .map(|d| (d.name.as_str(), d.engine, d.database.as_deref()))
            .collect();
        assert_eq!(
            names,
            [("db", DbEngine::Postgres, Some("shop")), ("redis", DbEngine::Redis, None)]
        );
        let env: BTreeMap<&str, &str> =
            (w.env.iter()).map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(
            env["DATABASE_URL"],
            "postgresql+psycopg://{db.db.authority}/shop?{db.db.query}&sslmode=disable"
        );
        assert_eq!(
            env["TEST_DATABASE_URL"],
            "postgres://{db.db.authority}/shop_test?{db.db.query}"
        );
        assert_eq!(env["REDIS_URL"], "redis://{db.redis.authority}/0");
        assert_eq!(env["CELERY_BROKER_URL"], "redis://{db.redis.authority}/1");
        assert_eq!(env["RATELIMIT_STORAGE_URI"], "redis://{db.redis.authority}/2");
        let expected: Vec<&str> = w.expected.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(expected, ["SECRET_KEY", "SENTRY_DSN"]);
        assert!(w.example);
        let said = w.notes.join("\n");
        assert!(said.contains("TEST_DATABASE_URL names database shop_test"), "{said}");
        assert!(said.contains("POSTGRES_PASSWORD of db not taken"), "{said}");
    }

    #[test]
    fn without_a_compose_file_each_engine_on_this_machine_gets_one_database() {
        let w = wiring(
            &[(
                ".env.example",
                "DATABASE_URL=mysql+pymysql://root@127.0.0.1:3306/app\n\
                 CACHE_URL=redis://localhost/3\nQUEUE_URL=redis://localhost/4\n\
                 REMOTE_URL=postgres://db.example.com/prod\n\
                 DB_HOST=127.0.0.1\nDB_PORT=3306\n",
            )],
            &["mariadb"],
        );
        let names: Vec<(&str, Option<&str>)> =
            (w.databases.iter()).map(|d| (d.name.as_str(), d.database.as_deref())).collect();
        assert_eq!(names, [("mariadb-2", Some("app")), ("redis", None)]);
        assert_eq!(w.env[0].1, "mysql+pymysql://{db.mariadb-2.authority}/app?{db.mariadb-2.query}");
        assert_eq!(w.env.len(), 5);
        // `DB_HOST`: the one SQL database's.
        assert_eq!(w.env[3], ("DB_HOST".into(), "{db.mariadb-2.host}".into()));
        assert!(w.notes.iter().any(|n| n.contains("REMOTE_URL not taken")), "{:?}", w.notes);
    }

    #[test]
    fn a_hostile_compose_file_writes_nothing_but_comments_and_its_databases() {
        let compose = "services:\n  \"db\\n[services.evil]\\ncommand = ['x']\":\n    \
                       image: \"postgres:16\\n[services.worse]\\u001b]0;t\\u0007\"\n  \
                       \"app\\u001b[2J\":\n    build: .\n";
        let w = wiring(
            &[
                ("compose.yaml", compose),
                (".env.example", "KEY=\"a\\nb\u{1b}[2J\"\nURL=postgres://localhost/x\n"),
            ],
            &["app"],
        );
        assert_eq!(w.databases.len(), 1, "{w:?}");
        let layout = super::super::Layout { wiring: w.clone(), ..super::super::Layout::default() };
        let text = super::super::generic(&layout);
        let profile = crate::Profile::parse(&text, "omnidev.toml").expect(&text);
        assert!(text.contains("# What `omnidev init` took"), "{text}");
        assert_eq!(profile.services.keys().collect::<Vec<_>>(), ["app"], "{text}");
        assert!(!text.contains('\u{1b}'), "{text}");
        for note in &w.notes {
            assert!(!note.chars().any(omnidev_core::text::obeyed), "{note:?}");
        }
    }

    #[test]
    fn an_address_in_parts_points_at_the_pods_as_a_url_does() {
        let w = wiring(
            &[
                (
                    "compose.yaml",
                    "services:\n  postgres:\n    image: postgres:16\n  cache:\n    image: redis\n",
                ),
                (
                    ".env.example",
                    "POSTGRES_SERVER=postgres # the compose service\nPOSTGRES_PORT=5432\n\
                     POSTGRES_USER=app\nPOSTGRES_PASSWORD=secret\nPOSTGRES_DB=appdb\n\
                     REDIS_HOST = localhost\nREDIS_PORT = 6379\nREDIS_DB=0\n\
                     PGHOST=db.example.com\nMAIL_HOST=localhost\n",
                ),
            ],
            &[],
        );
        let env: BTreeMap<&str, &str> =
            (w.env.iter()).map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let want = BTreeMap::from([
            ("POSTGRES_SERVER", "{db.postgres.host}"),
            ("POSTGRES_PORT", "{db.postgres.port}"),
            ("POSTGRES_USER", "omnidev"),
            ("POSTGRES_PASSWORD", "{db.postgres.password}"),
            ("POSTGRES_DB", "appdb"),
            ("REDIS_HOST", "{db.cache.host}"),
            ("REDIS_PORT", "{db.cache.port}"),
        ]);
        assert_eq!(env, want);
        assert_eq!(w.databases[0].database.as_deref(), Some("appdb"));
        let expected: Vec<&str> = w.expected.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(expected, ["REDIS_DB", "PGHOST", "MAIL_HOST"]);
    }

    #[test]
    fn the_add_ons_of_an_app_json_are_the_pods_databases() {
        let w = wiring(
            &[(
                "app.json",
                r#"{"addons": ["heroku-postgresql:essential-0", {"plan": "heroku-redis", "as": "CACHE"},
                    "papertrail"], "env": {"DJANGO_SECRET_KEY": {"generator": "secret"}}}"#,
            )],
            &["web"],
        );
        let names: Vec<&str> = w.databases.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["postgres", "redis"]);
        assert_eq!(
            w.env,
            [
                ("DATABASE_URL".to_owned(), "{db.postgres.url}".to_owned()),
                ("CACHE_URL".to_owned(), "{db.redis.url}".to_owned())
            ]
        );
        assert_eq!(w.expected, [("DJANGO_SECRET_KEY".to_owned(), String::new())]);
        let w = wiring(&[("app.json", "{\"addons\": 3}")], &[]);
        assert!(w.notes[0].starts_with("app.json: not read: "), "{:?}", w.notes);
    }

    #[test]
    fn braces_in_a_url_stay_text_and_a_broken_compose_file_is_a_note() {
        let w = wiring(
            &[
                ("docker-compose.yml", "services: [\n"),
                (".env.sample", "DATABASE_URL=postgres://localhost/app?options={x}\n"),
            ],
            &[],
        );
        assert_eq!(
            w.env[0].1,
            "postgres://{db.postgres.authority}/app?{db.postgres.query}&options={{x}}"
        );
        assert!(w.notes[0].starts_with("docker-compose.yml: not read: "), "{:?}", w.notes);
        // The parser's error, however many lines, is a comment.
        let layout = super::super::Layout { wiring: w, ..super::super::Layout::default() };
        let text = super::super::generic(&layout);
        crate::Profile::parse(&text, "omnidev.toml").expect(&text);
    }
}
