//! The services of a profile's server databases ([`crate::database`]):
//! each an ordinary service named like its database, whose command makes
//! the data once and then runs the server, ready when the engine's own
//! client reaches it through its socket.

use std::path::{Path, PathBuf};

use indexmap::IndexMap;

use super::Service;
use crate::database::{Database, DbEngine, DbPlace};
use crate::error::Result;

/// The services of a profile's server databases, named like them, ready
/// to render as any other: `bin_dir` finds an engine's programs.
pub(crate) fn services(
    databases: &IndexMap<String, Database>,
    place: &DbPlace<'_>,
    programs: impl Fn(DbEngine) -> Result<Vec<PathBuf>>,
) -> Result<IndexMap<String, Service>> {
    let mut services = IndexMap::new();
    for (name, database) in databases {
        if !database.engine.is_server() {
            continue;
        }
        crate::database::refuse_root(name, database.engine)?;
        let programs = programs(database.engine)?;
        let service = match database.engine {
            DbEngine::Sqlite => continue,
            DbEngine::Postgres => postgres(name, database, place, &programs),
            DbEngine::Mariadb => mariadb(name, database, place, &programs),
            DbEngine::Redis => redis(name, database, place, &programs),
        };
        services.insert(name.clone(), service);
    }
    Ok(services)
}

/// The script that starts a pod's Postgres: the data directory made once
/// (in `DATA.init`, moved into place when complete; a directory there that
/// is not Postgres's is never touched), then the server in its place.
const POSTGRES_SCRIPT: &str = r#"bin=$1 data=$2 sock=$3 port=$4 name=$5 secret=$6
if must_make PG_VERSION Postgres; then
  "$bin/initdb" -D "$data.init" -U omnidev -E UTF8 --no-locale --auth-local=trust \
    --auth-host=scram-sha-256 --pwfile="$secret" >/dev/null
  echo "CREATE DATABASE \"$name\";" | "$bin/postgres" --single -D "$data.init" postgres >/dev/null
  made Postgres
fi
mkdir -p "$sock"
exec "$bin/postgres" -D "$data" -k "$sock" -p "$port" -h 127.0.0.1 \
  -c unix_socket_permissions=0700 -c listen_addresses=127.0.0.1
"#;

/// What every server's script starts with: `must_make MARK ENGINE` is
/// true when `$data` is to be made (into `$data.init`: a directory there
/// that holds no `MARK` of the engine is never touched, the start fails
/// saying so), `made ENGINE` moves it into place once complete.
const PREAMBLE: &str = r#"set -eu
umask 077
# A swap of its data cut short (`omnidev db restore`): the old put back.
recover() {
  if [ ! -e "$data" ] && [ -e "$data.previous" ]; then mv "$data.previous" "$data"; fi
}
must_make() {
  recover
  [ -e "$data/$1" ] && return 1
  if [ -e "$data" ]; then
    echo "omnidev: $data exists but holds no $2 data; move it away to start afresh" >&2
    exit 1
  fi
  rm -rf "$data.init"
  mkdir -p "$(dirname "$data")"
}
made() {
  mv "$data.init" "$data"
  echo "omnidev: made the $1 data directory $data"
}
"#;

/// Text as a literal of a template (braces doubled).
fn literal(text: impl AsRef<str>) -> String {
    text.as_ref().replace('{', "{{").replace('}', "}}")
}

fn path_literal(path: &Path) -> String {
    literal(path.to_string_lossy())
}

/// A server database's service: `script` run by `sh` with `args`, ready
/// when `probe` exits 0, stopped with `stop_signal`.
fn server(script: &str, args: Vec<String>, probe: Vec<String>, stop_signal: &str) -> Service {
    let mut command = vec![
        "sh".to_owned(),
        "-c".to_owned(),
        literal(format!("{PREAMBLE}{script}")),
        "omnidev-db".to_owned(),
    ];
    command.extend(args);
    Service {
        command: Some(command),
        restart: Some(omnidev_core::RestartPolicy::Always),
        stop_signal: Some(stop_signal.to_owned()),
        grace_ms: Some(30_000),
        ready: Some(super::Ready {
            command: Some(probe),
            interval_ms: Some(100),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn postgres(name: &str, database: &Database, place: &DbPlace<'_>, programs: &[PathBuf]) -> Service {
    let bin = programs[0].parent().unwrap_or(Path::new("/"));
    let data = database.data_dir(name, place.pod_dir);
    let port = format!("{{port.{name}}}");
    let args = vec![
        path_literal(bin),
        path_literal(&data),
        path_literal(place.socket_dir),
        port.clone(),
        literal(database.database_name(name)),
        path_literal(&crate::database::password_file(name, place.pod_dir)),
    ];
    let probe = vec![
        path_literal(&bin.join("pg_isready")),
        "-q".to_owned(),
        "-h".to_owned(),
        path_literal(place.socket_dir),
        "-p".to_owned(),
        port,
        "-U".to_owned(),
        crate::database::USER.to_owned(),
        "-d".to_owned(),
        literal(database.database_name(name)),
    ];
    // A fast shutdown: clients are disconnected, a checkpoint written.
    server(POSTGRES_SCRIPT, args, probe, "SIGINT")
}

/// The script that starts a pod's MariaDB: the data directory made once
/// (`mariadb-install-db`, the database created in bootstrap mode, in
/// `DATA.init` moved into place when complete; the user's own account
/// through the socket, `omnidev` with the password over TCP), then the
/// server.
const MARIADB_SCRIPT: &str = r#"server=$1 install=$2 data=$3 socket=$4 port=$5 name=$6 secret=$7
if must_make mysql MariaDB; then
  "$install" --no-defaults --datadir="$data.init" \
    --auth-root-authentication-method=socket --skip-test-db >/dev/null
  # Bootstrap mode starts without the grant tables: FLUSH loads them.
  printf 'FLUSH PRIVILEGES;\nCREATE DATABASE `%s`;\nCREATE USER '"'"'omnidev'"'"'@'"'"'127.0.0.1'"'"' IDENTIFIED BY '"'"'%s'"'"';\nGRANT ALL ON `%s`.* TO '"'"'omnidev'"'"'@'"'"'127.0.0.1'"'"';\n' \
    "$name" "$(cat "$secret")" "$name" |
    "$server" --no-defaults --datadir="$data.init" --bootstrap --skip-networking >/dev/null
  made MariaDB
fi
mkdir -p "$(dirname "$socket")"
exec "$server" --no-defaults --datadir="$data" --socket="$socket" --port="$port" \
  --bind-address=127.0.0.1 --pid-file="$data/mariadbd.pid" --log-error=
"#;

fn mariadb(name: &str, database: &Database, place: &DbPlace<'_>, programs: &[PathBuf]) -> Service {
    let data = database.data_dir(name, place.pod_dir);
    let socket = place.socket_dir.join(format!("{name}.mariadb.sock"));
    let args = vec![
        path_literal(&programs[0]),
        path_literal(&programs[1]),
        path_literal(&data),
        path_literal(&socket),
        format!("{{port.{name}}}"),
        literal(database.database_name(name)),
        path_literal(&crate::database::password_file(name, place.pod_dir)),
    ];
    let probe = vec![
        path_literal(&programs[2]),
        "--no-defaults".to_owned(),
        format!("--socket={}", path_literal(&socket)),
        "ping".to_owned(),
    ];
    server(MARIADB_SCRIPT, args, probe, "SIGTERM")
}

/// The script that starts a pod's Redis: its configuration (the password
/// among it, so on no command line) written 0600 beside its data, then
/// the server, its data kept in an append-only file.
const REDIS_SCRIPT: &str = r#"server=$1 data=$2 socket=$3 port=$4 secret=$5
recover
mkdir -p "$data" "$(dirname "$socket")"
printf 'port %s\nbind 127.0.0.1\nunixsocket %s\nunixsocketperm 700\ndir %s\nappendonly yes\nrequirepass %s\n' \
  "$port" "$socket" "$data" "$(cat "$secret")" > "$data/redis.conf"
exec "$server" "$data/redis.conf"
"#;

fn redis(name: &str, database: &Database, place: &DbPlace<'_>, programs: &[PathBuf]) -> Service {
    let data = database.data_dir(name, place.pod_dir);
    let socket = place.socket_dir.join(format!("{name}.redis.sock"));
    let secret = crate::database::password_file(name, place.pod_dir);
    let args = vec![
        path_literal(&programs[0]),
        path_literal(&data),
        path_literal(&socket),
        format!("{{port.{name}}}"),
        path_literal(&secret),
    ];
    // The password from its file, never on the probe's command line.
    let probe = vec![
        "sh".to_owned(),
        "-c".to_owned(),
        literal(r#"REDISCLI_AUTH=$(cat "$2") "$1" -s "$3" ping | grep -qx PONG"#),
        "omnidev-db-probe".to_owned(),
        path_literal(&programs[1]),
        path_literal(&secret),
        path_literal(&socket),
    ];
    server(REDIS_SCRIPT, args, probe, "SIGTERM")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::database::DbEngine;

    fn database(engine: DbEngine) -> Database {
        Database { engine, ..Database::default() }
    }

    /// A server database is a service named like it, running the engine's
    /// programs on the pod's data and socket, ready by its own client, its
    /// braces literal; an SQLite one is none; Postgres and MariaDB are
    /// refused as root, Redis is not.
    #[test]
    fn each_server_database_is_a_service_of_its_name() {
        let ports = crate::Ports::default();
        let place = DbPlace {
            pod_dir: Path::new("/pods/{odd}"),
            socket_dir: Path::new("/run/omnidev/0123"),
            ports: &ports,
        };
        let programs = |engine: DbEngine| {
            Ok(engine.programs().0.iter().map(|p| Path::new("/opt/bin").join(p)).collect())
        };
        let databases: IndexMap<String, Database> = [
            ("cache".to_owned(), database(DbEngine::Redis)),
            ("files".to_owned(), database(DbEngine::Sqlite)),
        ]
        .into();
        let made = services(&databases, &place, programs).expect("services");
        assert_eq!(made.keys().collect::<Vec<_>>(), ["cache"]);
        let cache = &made["cache"];
        let command = cache.command.as_ref().expect("a command");
        assert!(command.contains(&"/opt/bin/redis-server".to_owned()), "{command:?}");
        assert!(command.contains(&"/pods/{{odd}}/data/cache".to_owned()), "{command:?}");
        assert!(command.contains(&"{port.cache}".to_owned()), "{command:?}");
        let probe = cache.ready.as_ref().and_then(|r| r.command.as_ref()).expect("a probe");
        assert!(probe.contains(&"/opt/bin/redis-cli".to_owned()), "{probe:?}");
        // The password is read from its file, never given as an argument.
        assert!(!probe.iter().any(|a| a == "-a"), "{probe:?}");
        assert!(probe.contains(&"/pods/{{odd}}/data/cache.password".to_owned()), "{probe:?}");
        for engine in [DbEngine::Postgres, DbEngine::Mariadb] {
            let databases: IndexMap<String, Database> =
                [("main".to_owned(), database(engine))].into();
            let made = services(&databases, &place, programs);
            if nix::unistd::geteuid().is_root() {
                let error = made.expect_err("refused as root").to_string();
                assert!(error.contains("cannot run as root"), "{error}");
            } else {
                let made = made.expect("a service");
                let probe = made["main"].ready.as_ref().and_then(|r| r.command.clone());
                assert!(probe.is_some_and(|p| p[0].starts_with("/opt/bin/")));
            }
        }
    }
}
