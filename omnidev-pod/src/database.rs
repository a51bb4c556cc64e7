//! A pod's databases (`[databases.NAME] engine = "…"`): SQLite, a file in
//! the pod, and Postgres, MariaDB and Redis, servers of the pod's own run
//! from the machine's binaries.
//!
//! A server database is an ordinary service of the rendered pod, named
//! like the database, with a port of the same name: it is supervised,
//! logged, restarted and shown as every service is. Its data is under
//! `{pod}/data/NAME`, initialised once (the first start makes it, in a
//! directory of its own that is moved into place only when complete);
//! it listens on its pod port on 127.0.0.1 and on a unix socket in the
//! pod's socket directory (under the user's runtime directory, 0700, so
//! only the user reaches it: no password over the socket, none accepted
//! over TCP without the one kept 0600 beside the data); it is ready once
//! it accepts connections on that socket, and stops with a fast shutdown
//! (a checkpoint: no recovery at the next start).
//!
//! `{db.NAME.url}` and its parts are placeholders every other part of the
//! profile can use; a service that uses one (or every service, when the
//! pod's `[env]` does) starts once the database is ready.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// `[databases.NAME]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Database {
    /// What runs it.
    pub engine: DbEngine,
    /// The scheme of `{db.NAME.url}` instead of the engine's own, for a
    /// driver that wants one (`postgresql+psycopg`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheme: Option<String>,
    /// SQLite: the file, relative to the pod directory (default
    /// `data/NAME/NAME.db`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Postgres, MariaDB: the database the server makes on its first start
    /// and `{db.NAME.url}` names (default NAME), e.g. the `POSTGRES_DB` of
    /// a compose file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub database: Option<String>,
    /// `{db.NAME.driver}`: the client package a program needs for this
    /// engine (`psycopg[binary]>=3.1,<4`), empty when none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver: Option<String>,
    /// The other engines it can run on (`omnidev up --db ENGINE`), each
    /// with the scheme and driver it takes there.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub engines: IndexMap<DbEngine, EngineChoice>,
    /// What fills a new database ([`crate::db_seed`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<DbSeed>,
}

/// `[databases.NAME.seed]`: a command run once against a new database,
/// and the files its result depends on.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct DbSeed {
    /// Program and arguments (templated), run in the checkout with the
    /// pod's environment once the database is ready.
    pub command: Vec<String>,
    /// Files and directories of the checkout its result depends on: the
    /// result is kept in the user's cache under a hash of them, and a new
    /// database with the same hash starts from it instead of seeding.
    #[serde(default)]
    pub inputs: Vec<String>,
}

/// What a database takes on another engine (`[databases.NAME.engines]`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct EngineChoice {
    /// The scheme of its URL there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheme: Option<String>,
    /// The driver there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver: Option<String>,
}

impl Database {
    /// This database on `engine`, when it lists it among its `engines`
    /// (or runs on it already).
    pub fn on(&self, engine: DbEngine) -> Option<Self> {
        if self.engine == engine {
            return Some(self.clone());
        }
        let choice = self.engines.get(&engine)?;
        Some(Self {
            engine,
            scheme: choice.scheme.clone(),
            path: None,
            database: self.database.clone().filter(|_| engine.names_databases()),
            seed: self.seed.clone(),
            driver: choice.driver.clone(),
            engines: self.engines.clone(),
        })
    }
}

/// A database engine.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DbEngine {
    /// A file in the pod; no server.
    #[default]
    Sqlite,
    /// A Postgres server of the pod's own.
    Postgres,
    /// A MariaDB (MySQL) server of the pod's own.
    Mariadb,
    /// A Redis server of the pod's own.
    Redis,
}

impl DbEngine {
    /// Whether it runs a server (a service and a port of the pod).
    pub fn is_server(self) -> bool {
        !matches!(self, DbEngine::Sqlite)
    }

    /// The port its server prefers.
    pub fn base_port(self) -> Option<u16> {
        match self {
            DbEngine::Sqlite => None,
            DbEngine::Postgres => Some(5432),
            DbEngine::Mariadb => Some(3306),
            DbEngine::Redis => Some(6379),
        }
    }

    /// The engine a word names (`postgres`, `mariadb`, `redis`, `sqlite`).
    pub fn from_word(word: &str) -> Option<Self> {
        [Self::Sqlite, Self::Postgres, Self::Mariadb, Self::Redis]
            .into_iter()
            .find(|engine| engine.word() == word)
    }

    /// The scheme of its URLs.
    pub fn scheme(self) -> &'static str {
        match self {
            DbEngine::Sqlite => "sqlite",
            DbEngine::Postgres => "postgresql",
            DbEngine::Mariadb => "mysql",
            DbEngine::Redis => "redis",
        }
    }

    /// Its word in a profile.
    pub fn word(self) -> &'static str {
        match self {
            DbEngine::Sqlite => "sqlite",
            DbEngine::Postgres => "postgres",
            DbEngine::Mariadb => "mariadb",
            DbEngine::Redis => "redis",
        }
    }

    /// The programs its server needs, the server first, and the Debian
    /// package that has them.
    pub fn programs(self) -> (&'static [&'static str], &'static str) {
        match self {
            DbEngine::Sqlite => (&[], "sqlite3"),
            DbEngine::Postgres => (&["postgres", "initdb", "pg_isready"], "postgresql"),
            DbEngine::Mariadb => {
                (&["mariadbd", "mariadb-install-db", "mariadb-admin"], "mariadb-server")
            }
            DbEngine::Redis => (&["redis-server", "redis-cli"], "redis-server"),
        }
    }

    /// Whether its server holds named databases (Postgres, MariaDB; a
    /// Redis numbers its own, an SQLite file is one).
    pub fn names_databases(self) -> bool {
        matches!(self, DbEngine::Postgres | DbEngine::Mariadb)
    }

    /// Whether its server refuses to run as root.
    fn refuses_root(self) -> bool {
        matches!(self, DbEngine::Postgres | DbEngine::Mariadb)
    }
}

/// The user a server database is made with and connected as.
pub const USER: &str = "omnidev";

/// The parts `{db.NAME.PART}` may name.
pub const PARTS: &[&str] = &[
    "url",
    "authority",
    "query",
    "host",
    "port",
    "socket-dir",
    "socket",
    "user",
    "name",
    "path",
    "password-file",
    "password",
    "driver",
];

/// What `{db.NAME.PART}` stands for in one pod: each part's text.
pub type DbParts = BTreeMap<String, String>;

/// Where a pod's databases live and are reached.
#[derive(Debug, Clone, Copy)]
pub struct DbPlace<'a> {
    /// The pod directory.
    pub pod_dir: &'a Path,
    /// The pod's socket directory (short: a unix socket's path must fit).
    pub socket_dir: &'a Path,
    /// The pod's ports (a server database's is named like it).
    pub ports: &'a crate::Ports,
}

impl Database {
    /// The data directory of database `name` (a server's), or its file's
    /// directory (SQLite).
    pub fn data_dir(&self, name: &str, pod_dir: &Path) -> PathBuf {
        match self.engine {
            DbEngine::Sqlite => self
                .sqlite_file(name, pod_dir)
                .parent()
                .map_or_else(|| pod_dir.to_path_buf(), Path::to_path_buf),
            DbEngine::Postgres | DbEngine::Mariadb | DbEngine::Redis => {
                pod_dir.join("data").join(name)
            }
        }
    }

    /// Where database `name`'s data is in the pod `pod_dir`: a server's
    /// data directory, an SQLite file.
    pub fn data_path(&self, name: &str, pod_dir: &Path) -> PathBuf {
        match self.engine {
            DbEngine::Sqlite => self.sqlite_file(name, pod_dir),
            DbEngine::Postgres | DbEngine::Mariadb | DbEngine::Redis => {
                self.data_dir(name, pod_dir)
            }
        }
    }

    fn sqlite_file(&self, name: &str, pod_dir: &Path) -> PathBuf {
        match &self.path {
            Some(path) => pod_dir.join(path),
            None => pod_dir.join("data").join(name).join(format!("{name}.db")),
        }
    }

    /// The database a server makes and its URL names: `database`, else
    /// the database's own `name`.
    pub fn database_name<'a>(&'a self, name: &'a str) -> &'a str {
        self.database.as_deref().unwrap_or(name)
    }

    /// What each `{db.NAME.PART}` stands for. A server's URL is
    /// `SCHEME://{authority}/{name}?{query}` (Redis: `/0`, no query), so a
    /// URL of another scheme, database or query can be made of its parts.
    /// A server's password (for TCP; Redis asks for it on the socket too,
    /// so its authority carries it) is made here on first use, 0600 beside
    /// its data.
    pub fn parts(&self, name: &str, place: &DbPlace<'_>) -> Result<DbParts> {
        let text = |p: &Path| p.to_string_lossy().into_owned();
        let mut parts = DbParts::new();
        let port = (place.ports.get(name)).map_or_else(String::new, |p| p.to_string());
        let database = self.database_name(name).to_owned();
        let scheme = self.scheme.as_deref().unwrap_or(self.engine.scheme());
        if self.engine == DbEngine::Sqlite {
            let file = text(&self.sqlite_file(name, place.pod_dir));
            parts.insert("url".into(), format!("{scheme}:///{file}"));
            parts.insert("path".into(), file);
            parts.insert("name".into(), database);
            parts.insert("driver".into(), self.driver.clone().unwrap_or_default());
            return Ok(parts);
        }
        // Every server's password file exists before it first starts.
        let password = password(name, place.pod_dir)?;
        let (user, socket, authority, query, path) = match self.engine {
            DbEngine::Postgres => {
                let socket = place.socket_dir.join(format!(".s.PGSQL.{port}"));
                let query = format!("host={}&port={port}", percent_encode(&text(place.socket_dir)));
                (USER.to_owned(), socket, format!("{USER}@"), query, database.clone())
            }
            DbEngine::Mariadb => {
                // The socket's account is the user's own (unix_socket).
                let user = os_user();
                let socket = place.socket_dir.join(format!("{name}.mariadb.sock"));
                let query = format!("unix_socket={}", percent_encode(&text(&socket)));
                let authority = format!("{user}@localhost");
                (user, socket, authority, query, database.clone())
            }
            DbEngine::Redis | DbEngine::Sqlite => {
                let socket = place.socket_dir.join(format!("{name}.redis.sock"));
                let authority = format!(":{password}@127.0.0.1:{port}");
                (String::new(), socket, authority, String::new(), "0".to_owned())
            }
        };
        let url = if query.is_empty() {
            format!("{scheme}://{authority}/{path}")
        } else {
            format!("{scheme}://{authority}/{path}?{query}")
        };
        for (part, value) in [
            ("url", url),
            ("authority", authority),
            ("query", query),
            ("host", "127.0.0.1".to_owned()),
            ("port", port),
            ("socket-dir", text(place.socket_dir)),
            ("socket", text(&socket)),
            ("user", user),
            ("name", database),
            ("password-file", text(&password_file(name, place.pod_dir))),
            ("password", password),
            ("driver", self.driver.clone().unwrap_or_default()),
        ] {
            parts.insert(part.into(), value);
        }
        Ok(parts)
    }
}

/// The name of the user omnidev runs as.
fn os_user() -> String {
    let uid = nix::unistd::getuid();
    nix::unistd::User::from_uid(uid)
        .ok()
        .flatten()
        .map_or_else(|| uid.to_string(), |user| user.name)
}

/// The password of database `name` of the pod: the one in its file, or a
/// new one written there (0600, atomically). Nothing is written in a
/// directory that is no pod yet (`profile check` renders against the pod
/// `up` would make): the password is empty there until `up` makes the pod.
fn password(name: &str, pod_dir: &Path) -> Result<String> {
    let path = password_file(name, pod_dir);
    let read = omnidev_core::fs::read_file(&path, 1024).map_err(Error::io("read", &path))?;
    if let Some(text) = read.and_then(|bytes| String::from_utf8(bytes).ok())
        && !text.trim().is_empty()
    {
        return Ok(text.trim().to_owned());
    }
    if !pod_dir.join(crate::layout::MARKER).is_file() {
        return Ok(String::new());
    }
    let text = crate::ids::random_hex(24).map_err(Error::io("make", &path))?;
    std::fs::create_dir_all(pod_dir.join("data"))
        .map_err(Error::io("create", pod_dir.join("data")))?;
    omnidev_core::fs::write_atomic(&path, text.as_bytes()).map_err(Error::io("write", &path))?;
    Ok(text)
}

/// The file holding the password a server database takes over TCP (0600).
pub fn password_file(name: &str, pod_dir: &Path) -> PathBuf {
    pod_dir.join("data").join(format!("{name}.password"))
}

/// A query value's reserved characters escaped (a path in `?host=`).
fn percent_encode(text: &str) -> String {
    use percent_encoding::{AsciiSet, NON_ALPHANUMERIC};
    const QUERY_VALUE: &AsciiSet =
        &NON_ALPHANUMERIC.remove(b'-').remove(b'_').remove(b'.').remove(b'~').remove(b'/');
    percent_encoding::utf8_percent_encode(text, QUERY_VALUE).to_string()
}

/// Whether the server databases of a profile can run here: not as root
/// (Postgres refuses), and their programs installed. Asked before anything
/// starts (`up`, `up --detach`); an error says why and what to do.
pub fn check_can_run(databases: &IndexMap<String, Database>, path: &std::ffi::OsStr) -> Result<()> {
    for (name, database) in databases.iter().filter(|(_, d)| d.engine.is_server()) {
        refuse_root(name, database.engine)?;
        find_programs(database.engine, path)?;
    }
    Ok(())
}

pub(crate) fn refuse_root(name: &str, engine: DbEngine) -> Result<()> {
    if engine.refuses_root() && nix::unistd::geteuid().is_root() {
        return Err(Error::DatabaseAsRoot { name: name.to_owned(), engine: engine.word() });
    }
    Ok(())
}

/// An engine's programs, in the order [`DbEngine::programs`] names them:
/// on `path`, else where Debian puts them (the newest
/// `/usr/lib/postgresql/*/bin`, all of Postgres's from one; `/usr/sbin`,
/// off a user's `PATH`); an error naming the package when one is missing.
pub fn find_programs(engine: DbEngine, path: &std::ffi::OsStr) -> Result<Vec<PathBuf>> {
    let (needed, package) = engine.programs();
    let mut dirs: Vec<PathBuf> = std::env::split_paths(path).collect();
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse::<u32>().ok()?;
            Some((version, entry.path().join("bin")))
        })
        .collect();
    versions.sort();
    dirs.extend(versions.into_iter().rev().map(|(_, dir)| dir));
    dirs.extend([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/bin")]);
    let has = |dir: &Path, program: &str| dir.join(program).is_file();
    let missing = || Error::DatabaseProgramMissing { program: needed[0], package };
    if engine == DbEngine::Postgres {
        // initdb's data directory is for its own server's version.
        let dir =
            (dirs.iter()).find(|dir| needed.iter().all(|p| has(dir, p))).ok_or_else(missing)?;
        return Ok(needed.iter().map(|p| dir.join(p)).collect());
    }
    needed
        .iter()
        .map(|program| {
            (dirs.iter())
                .find(|dir| has(dir, program))
                .map(|dir| dir.join(program))
                .ok_or_else(missing)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place<'a>(pod: &'a Path, ports: &'a crate::Ports) -> DbPlace<'a> {
        DbPlace {
            pod_dir: pod,
            socket_dir: Path::new("/run/user/1000/omnidev/0123456789abcdef"),
            ports,
        }
    }

    #[test]
    fn each_engine_has_its_url_and_parts() {
        let mut allocated = crate::Ports::default();
        allocated.0.insert("main".into(), 5433);
        let pod = Path::new("/pods/app-1");
        let postgres = Database {
            engine: DbEngine::Postgres,
            scheme: Some("postgresql+psycopg".into()),
            ..Database::default()
        };
        let parts = postgres.parts("main", &place(pod, &allocated)).expect("parts");
        assert_eq!(
            parts["url"],
            "postgresql+psycopg://omnidev@/main?host=/run/user/1000/omnidev/0123456789abcdef&port=5433"
        );
        assert_eq!(parts["port"], "5433");
        assert_eq!(parts["password-file"], "/pods/app-1/data/main.password");
        let sqlite = Database {
            engine: DbEngine::Sqlite,
            path: Some("data/omnigent/chat.db".into()),
            ..Database::default()
        };
        let parts = sqlite.parts("omnigent", &place(pod, &allocated)).expect("parts");
        assert_eq!(parts["url"], "sqlite:////pods/app-1/data/omnigent/chat.db");
        assert_eq!(parts["path"], "/pods/app-1/data/omnigent/chat.db");
        for part in parts.keys() {
            assert!(PARTS.contains(&part.as_str()), "{part}");
        }
    }

    #[test]
    fn a_password_is_made_in_a_pod_and_never_outside_one() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut allocated = crate::Ports::default();
        allocated.0.insert("cache".into(), 6380);
        let redis = Database { engine: DbEngine::Redis, ..Database::default() };
        // No pod yet (`profile check`): nothing written, no password.
        let parts = redis.parts("cache", &place(dir.path(), &allocated)).expect("parts");
        assert_eq!(parts["authority"], ":@127.0.0.1:6380");
        assert_eq!(std::fs::read_dir(dir.path()).expect("list").count(), 0);
        std::fs::write(dir.path().join(crate::layout::MARKER), "").expect("marker");
        let parts = redis.parts("cache", &place(dir.path(), &allocated)).expect("parts");
        let file = password_file("cache", dir.path());
        let password = std::fs::read_to_string(&file).expect("made");
        assert_eq!(parts["url"], format!("redis://:{password}@127.0.0.1:6380/0"));
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(&file).expect("stat").permissions(),
        );
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn a_missing_server_names_its_package() {
        let empty = tempfile::tempdir().expect("tempdir");
        for engine in [DbEngine::Postgres, DbEngine::Mariadb, DbEngine::Redis] {
            let found = find_programs(engine, empty.path().as_os_str());
            // Where Debian's packages are installed, they are found instead.
            match found {
                Ok(programs) => assert!(programs.iter().all(|p| p.is_file()), "{programs:?}"),
                Err(error) => assert!(error.to_string().contains(engine.programs().1), "{error}"),
            }
        }
    }
}
