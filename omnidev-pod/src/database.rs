//! A pod's databases (`[databases.NAME] engine = "…"`): SQLite, a file in
//! the pod, and Postgres, a server of the pod's own run from the machine's
//! binaries.
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Database {
    /// What runs it.
    pub engine: Engine,
    /// The scheme of `{db.NAME.url}` instead of the engine's own, for a
    /// driver that wants one (`postgresql+psycopg`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheme: Option<String>,
    /// SQLite: the file, relative to the pod directory (default
    /// `data/NAME/NAME.db`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

/// A database engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Engine {
    /// A file in the pod; no server.
    Sqlite,
    /// A Postgres server of the pod's own.
    Postgres,
}

impl Engine {
    /// Whether it runs a server (a service and a port of the pod).
    pub fn is_server(self) -> bool {
        !matches!(self, Engine::Sqlite)
    }

    /// The port its server prefers.
    pub fn base_port(self) -> Option<u16> {
        match self {
            Engine::Sqlite => None,
            Engine::Postgres => Some(5432),
        }
    }

    fn word(self) -> &'static str {
        match self {
            Engine::Sqlite => "sqlite",
            Engine::Postgres => "postgres",
        }
    }
}

/// The user a server database is made with and connected as.
pub const USER: &str = "omnidev";

/// The parts `{db.NAME.PART}` may name.
pub const PARTS: &[&str] = &[
    "url",
    "host",
    "port",
    "socket-dir",
    "user",
    "name",
    "path",
    "password-file",
];

/// What `{db.NAME.PART}` stands for in one pod: each part's text.
pub type Parts = BTreeMap<String, String>;

/// Where a pod's databases live and are reached.
#[derive(Debug, Clone, Copy)]
pub struct Place<'a> {
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
            Engine::Sqlite => self
                .sqlite_file(name, pod_dir)
                .parent()
                .map_or_else(|| pod_dir.to_path_buf(), Path::to_path_buf),
            Engine::Postgres => pod_dir.join("data").join(name),
        }
    }

    fn sqlite_file(&self, name: &str, pod_dir: &Path) -> PathBuf {
        match &self.path {
            Some(path) => pod_dir.join(path),
            None => pod_dir.join("data").join(name).join(format!("{name}.db")),
        }
    }

    /// What each `{db.NAME.PART}` stands for.
    pub fn parts(&self, name: &str, place: &Place<'_>) -> Parts {
        let text = |p: &Path| p.to_string_lossy().into_owned();
        let mut parts = Parts::new();
        match self.engine {
            Engine::Sqlite => {
                let file = self.sqlite_file(name, place.pod_dir);
                let scheme = self.scheme.as_deref().unwrap_or("sqlite");
                parts.insert("url".into(), format!("{scheme}:///{}", text(&file)));
                parts.insert("path".into(), text(&file));
                parts.insert("name".into(), name.to_owned());
            }
            Engine::Postgres => {
                let port = place
                    .ports
                    .get(name)
                    .map_or_else(String::new, |p| p.to_string());
                let socket_dir = text(place.socket_dir);
                let scheme = self.scheme.as_deref().unwrap_or("postgresql");
                parts.insert(
                    "url".into(),
                    format!(
                        "{scheme}://{USER}@/{name}?host={}&port={port}",
                        percent_encode(&socket_dir)
                    ),
                );
                parts.insert("host".into(), "127.0.0.1".into());
                parts.insert("port".into(), port);
                parts.insert("socket-dir".into(), socket_dir);
                parts.insert("user".into(), USER.into());
                parts.insert("name".into(), name.to_owned());
                parts.insert(
                    "password-file".into(),
                    text(&password_file(name, place.pod_dir)),
                );
            }
        }
        parts
    }
}

/// The file holding the password a server database takes over TCP (0600).
fn password_file(name: &str, pod_dir: &Path) -> PathBuf {
    pod_dir.join("data").join(format!("{name}.password"))
}

/// A query value's reserved characters escaped (a path in `?host=`).
fn percent_encode(text: &str) -> String {
    use percent_encoding::{AsciiSet, NON_ALPHANUMERIC};
    const QUERY_VALUE: &AsciiSet = &NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'_')
        .remove(b'.')
        .remove(b'~')
        .remove(b'/');
    percent_encoding::utf8_percent_encode(text, QUERY_VALUE).to_string()
}

/// The services of a profile's server databases, named like them, ready
/// to render as any other: `bin_dir` finds an engine's programs.
pub fn services(
    databases: &IndexMap<String, Database>,
    place: &Place<'_>,
    bin_dir: impl Fn(Engine) -> Result<PathBuf>,
) -> Result<IndexMap<String, crate::profile::Service>> {
    let mut services = IndexMap::new();
    for (name, database) in databases {
        if !database.engine.is_server() {
            continue;
        }
        refuse_root(name, database.engine)?;
        let bin = bin_dir(database.engine)?;
        services.insert(name.clone(), postgres(name, database, place, &bin));
    }
    Ok(services)
}

/// Whether the server databases of a profile can run here: not as root
/// (Postgres refuses), and their programs installed. Asked before anything
/// starts (`up`, `up --detach`); an error says why and what to do.
pub fn check_can_run(databases: &IndexMap<String, Database>, path: &std::ffi::OsStr) -> Result<()> {
    for (name, database) in databases.iter().filter(|(_, d)| d.engine.is_server()) {
        refuse_root(name, database.engine)?;
        find_bin_dir(database.engine, path)?;
    }
    Ok(())
}

fn refuse_root(name: &str, engine: Engine) -> Result<()> {
    if nix::unistd::geteuid().is_root() {
        return Err(Error::DatabaseAsRoot {
            name: name.to_owned(),
            engine: engine.word(),
        });
    }
    Ok(())
}

/// The script that starts a pod's Postgres: the data directory made once
/// (in `DATA.init`, moved into place when complete; a directory there that
/// is not Postgres's is never touched), then the server in its place.
const POSTGRES_SCRIPT: &str = r#"set -eu
bin=$1 data=$2 sock=$3 port=$4 name=$5 secret=$6
umask 077
if [ ! -f "$data/PG_VERSION" ]; then
  if [ -e "$data" ]; then
    echo "omnidev: $data exists but holds no Postgres data; move it away to start afresh" >&2
    exit 1
  fi
  rm -rf "$data.init"
  mkdir -p "$(dirname "$data")"
  if [ ! -s "$secret" ]; then
    od -An -tx1 -N24 /dev/urandom | tr -d ' \n' > "$secret.tmp" && mv "$secret.tmp" "$secret"
  fi
  "$bin/initdb" -D "$data.init" -U omnidev -E UTF8 --no-locale --auth-local=trust \
    --auth-host=scram-sha-256 --pwfile="$secret" >/dev/null
  echo "CREATE DATABASE \"$name\";" | "$bin/postgres" --single -D "$data.init" postgres >/dev/null
  mv "$data.init" "$data"
  echo "omnidev: made the Postgres data directory $data"
fi
mkdir -p "$sock"
exec "$bin/postgres" -D "$data" -k "$sock" -p "$port" -h 127.0.0.1 \
  -c unix_socket_permissions=0700 -c listen_addresses=127.0.0.1
"#;

fn postgres(
    name: &str,
    database: &Database,
    place: &Place<'_>,
    bin: &Path,
) -> crate::profile::Service {
    let text = |p: &Path| p.to_string_lossy().into_owned();
    let data = database.data_dir(name, place.pod_dir);
    let socket_dir = text(place.socket_dir);
    let port = format!("{{port.{name}}}");
    // Braces in paths are doubled: the command is a template.
    let literal = |s: String| s.replace('{', "{{").replace('}', "}}");
    let command = vec![
        "sh".to_owned(),
        "-c".to_owned(),
        literal(POSTGRES_SCRIPT.to_owned()),
        "omnidev-postgres".to_owned(),
        literal(text(bin)),
        literal(text(&data)),
        literal(socket_dir.clone()),
        port.clone(),
        literal(name.to_owned()),
        literal(text(&password_file(name, place.pod_dir))),
    ];
    let probe = vec![
        literal(text(&bin.join("pg_isready"))),
        "-q".to_owned(),
        "-h".to_owned(),
        literal(socket_dir),
        "-p".to_owned(),
        port,
        "-U".to_owned(),
        USER.to_owned(),
        "-d".to_owned(),
        literal(name.to_owned()),
    ];
    crate::profile::Service {
        command: Some(command),
        restart: Some(omnidev_core::RestartPolicy::Always),
        // A fast shutdown: clients are disconnected, a checkpoint written.
        stop_signal: Some("SIGINT".to_owned()),
        grace_ms: Some(30_000),
        ready: Some(crate::profile::Ready {
            command: Some(probe),
            interval_ms: Some(100),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The directory of an engine's server programs: the one on `path` that
/// holds them, else the newest Debian puts under `/usr/lib/postgresql`;
/// an error naming the package when there is none.
pub fn find_bin_dir(engine: Engine, path: &std::ffi::OsStr) -> Result<PathBuf> {
    let (program, package) = match engine {
        Engine::Sqlite => return Ok(PathBuf::new()),
        Engine::Postgres => ("postgres", "postgresql"),
    };
    let needed = ["postgres", "initdb", "pg_isready"];
    let has_all = |dir: &Path| needed.iter().all(|p| dir.join(p).is_file());
    if let Some(dir) = std::env::split_paths(path).find(|dir| has_all(dir)) {
        return Ok(dir);
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse::<u32>().ok()?;
            Some((version, entry.path().join("bin")))
        })
        .filter(|(_, dir)| has_all(dir))
        .collect();
    versions.sort();
    versions
        .pop()
        .map(|(_, dir)| dir)
        .ok_or(Error::DatabaseProgramMissing { program, package })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place<'a>(pod: &'a Path, ports: &'a crate::Ports) -> Place<'a> {
        Place {
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
            engine: Engine::Postgres,
            scheme: Some("postgresql+psycopg".into()),
            path: None,
        };
        let parts = postgres.parts("main", &place(pod, &allocated));
        assert_eq!(
            parts["url"],
            "postgresql+psycopg://omnidev@/main?host=/run/user/1000/omnidev/0123456789abcdef&port=5433"
        );
        assert_eq!(parts["port"], "5433");
        assert_eq!(parts["password-file"], "/pods/app-1/data/main.password");
        let sqlite = Database {
            engine: Engine::Sqlite,
            scheme: None,
            path: Some("data/omnigent/chat.db".into()),
        };
        let parts = sqlite.parts("omnigent", &place(pod, &allocated));
        assert_eq!(parts["url"], "sqlite:////pods/app-1/data/omnigent/chat.db");
        assert_eq!(parts["path"], "/pods/app-1/data/omnigent/chat.db");
        for part in parts.keys() {
            assert!(PARTS.contains(&part.as_str()), "{part}");
        }
    }

    #[test]
    fn a_missing_server_names_its_package() {
        let empty = tempfile::tempdir().expect("tempdir");
        let found = find_bin_dir(Engine::Postgres, empty.path().as_os_str());
        // Where Debian's packages are installed, they are found instead.
        match found {
            Ok(dir) => assert!(dir.join("postgres").is_file(), "{dir:?}"),
            Err(error) => assert!(error.to_string().contains("postgresql"), "{error}"),
        }
    }
}
