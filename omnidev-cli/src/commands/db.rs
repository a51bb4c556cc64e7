//! `omnidev db [NAME]`: the engine's own shell on a database of the pod
//! (`psql`, `mariadb`, `redis-cli` on its socket, `sqlite3` on its file);
//! `omnidev db url [NAME]`:
//! its URL, as `{db.NAME.url}` gives it to the services.

use std::process::ExitCode;

use omnidev_pod::database::DbEngine;

use crate::cli::{DbAction, DbArgs};
use crate::error::{Error, Result};

/// Runs `omnidev db`.
pub fn run(args: &DbArgs) -> Result<ExitCode> {
    let data = crate::pod_data::act(args.action.as_ref());
    if let Some(said) = data.transpose()? {
        note!("omnidev: {said}");
        return Ok(ExitCode::SUCCESS);
    }
    let (pod, name, url) = match &args.action {
        Some(DbAction::Url { pod, name }) => (pod, name, true),
        Some(DbAction::Snapshots { pod }) => return crate::pod_data::snapshots(pod),
        _ => (&args.pod, &args.name, false),
    };
    let (checkout, name, parts) = crate::pod_data::database(pod, name.as_deref())?;
    let engine = checkout.profile.databases[&name].engine;
    if url {
        crate::output::write_stdout(&format!("{}\n", parts["url"]))?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut shell = match engine {
        DbEngine::Postgres => {
            let mut psql = std::process::Command::new("psql");
            psql.args(["-h", &parts["socket-dir"], "-p", &parts["port"]]).args([
                "-U",
                &parts["user"],
                "-d",
                &parts["name"],
            ]);
            psql
        }
        DbEngine::Mariadb => {
            let mut mariadb = std::process::Command::new("mariadb");
            mariadb
                .arg("--no-defaults")
                .arg(format!("--socket={}", parts["socket"]))
                .arg(&parts["name"]);
            mariadb
        }
        DbEngine::Redis => {
            // The password through the environment, on no command line.
            let file = std::path::Path::new(&parts["password-file"]);
            let password = omnidev_core::fs::read_file(file, 1024)
                .ok()
                .flatten()
                .map(|bytes| String::from_utf8_lossy(&bytes).trim().to_owned())
                .unwrap_or_default();
            let mut cli = std::process::Command::new("redis-cli");
            cli.args(["-s", &parts["socket"]]).env("REDISCLI_AUTH", password);
            cli
        }
        DbEngine::Sqlite => {
            let mut sqlite = std::process::Command::new("sqlite3");
            sqlite.arg(&parts["path"]);
            sqlite
        }
    };
    let program = shell.get_program().to_string_lossy().into_owned();
    // The shell takes the terminal: omnidev is replaced by it.
    let error = std::os::unix::process::CommandExt::exec(&mut shell);
    Err(Error::spawn(program)(error))
}
