//! `omnidev init`: a commented `omnidev.toml` for a checkout, from its
//! `Procfile` when it has one, else a short generic template.
//!
//! From a Procfile every process becomes a service run through `sh -c`
//! (so `$PORT` and shell syntax work as under foreman), each with a named
//! port of its own given to it as `PORT`; the bases are 100 apart from
//! 5000, as foreman numbers them. A `release:` process becomes a one-shot
//! (`restart = "never"`) the others wait for with `completed`.
//!
//! ```
//! let procfile = "web: python3 -m http.server $PORT\nworker: ./worker\n";
//! let processes = omnidev_pod::init::parse_procfile(procfile, "Procfile".as_ref()).unwrap();
//! let text = omnidev_pod::init::from_procfile(&processes, &Default::default());
//! let profile = omnidev_pod::Profile::parse(&text, "omnidev.toml").unwrap();
//! assert_eq!(profile.ports["web"], 5000);
//! assert_eq!(profile.ports["worker"], 5100);
//! assert_eq!(profile.services["web"].env["PORT"], "{port.web}");
//! ```

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::profile::PROFILE_FILE;

/// The Procfile's name at the checkout root.
pub const PROCFILE: &str = "Procfile";

/// The development Procfile, read instead of [`PROCFILE`] when both exist
/// (as foreman's and overmind's users keep one for local runs).
pub const PROCFILE_DEV: &str = "Procfile.dev";

/// The Procfile process that receives HTTP traffic (Heroku's): it gets a
/// URL and a readiness probe on its `$PORT`.
pub const WEB: &str = "web";

pub mod app_json;
pub mod compose;
pub mod wiring;

/// What `init` looks at in the checkout besides the Procfile.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Layout {
    /// The databases of its compose file and dotenv files, and their
    /// variables ([`wiring::Wiring::of`]).
    pub wiring: wiring::Wiring,
    /// A `.env` at the root: loaded for every service, as foreman does.
    pub dotenv: bool,
    /// A Python project at the root (`pyproject.toml`, `uv.lock` or a
    /// `requirements*.txt`): its venv is made by a prepare step.
    pub python: bool,
    /// The top-level directories holding source files, for watch rules.
    pub sources: Vec<String>,
}

/// Directories never suggested for watching: tools', dependencies' and
/// build output.
const NOT_SOURCES: &[&str] =
    &["node_modules", "venv", "env", "target", "dist", "build", "staticfiles", "__pycache__"];

/// Extensions that make a directory one of sources.
const SOURCE_EXTENSIONS: &[&str] =
    &["py", "rb", "js", "ts", "tsx", "jsx", "go", "rs", "java", "php", "ex", "exs"];

impl Layout {
    /// The layout of the checkout `repo`.
    pub fn of(repo: &Path) -> Self {
        let mut sources: Vec<String> = (std::fs::read_dir(repo).into_iter().flatten().flatten())
            .filter(|entry| entry.file_type().is_ok_and(|kind| kind.is_dir()))
            .filter_map(|entry| entry.file_name().into_string().ok())
            .filter(|name| !name.starts_with('.') && !NOT_SOURCES.contains(&name.as_str()))
            .filter(|name| holds_sources(&repo.join(name), 2))
            .collect();
        sources.sort();
        Self {
            wiring: wiring::Wiring::default(),
            dotenv: repo.join(".env").is_file(),
            python: crate::python::is_project(repo),
            sources,
        }
    }
}

/// Whether `dir` (or a directory below it, `depth` levels down) holds a
/// source file.
fn holds_sources(dir: &Path, depth: usize) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    entries.filter_map(Result::ok).any(|entry| {
        let path = entry.path();
        match entry.file_type() {
            Ok(kind) if kind.is_dir() => depth > 0 && holds_sources(&path, depth - 1),
            Ok(_) => path
                .extension()
                .and_then(|e| e.to_str())
                .is_some_and(|e| SOURCE_EXTENSIONS.contains(&e)),
            Err(_) => false,
        }
    })
}

/// The most bytes of a Procfile read.
pub const MAX_PROCFILE_BYTES: u64 = 1024 * 1024;

/// The port base of the first Procfile process; each next one is 100 up.
pub const FIRST_BASE: u16 = 5000;

/// The Procfile process that runs once before the others (Heroku's).
pub const RELEASE: &str = "release";

/// One `name: command` line of a Procfile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Process {
    /// The process name (a valid service name).
    pub name: String,
    /// The shell command.
    pub command: String,
}

/// What [`write()`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    /// The profile file.
    pub path: PathBuf,
    /// The Procfile it was made from, if any.
    pub procfile: Option<PathBuf>,
    /// The services it declares, in order.
    pub services: Vec<String>,
    /// The databases it declares (`name (engine)`), in order.
    pub databases: Vec<String>,
    /// What it took from the compose and dotenv files and what not, a
    /// line each.
    pub notes: Vec<String>,
    /// Whether it replaced a file that was there (`--force`).
    pub replaced: bool,
}

/// Parses a Procfile: `name: command` per line, blank lines and `#`
/// comments skipped. A name must be a valid service name (upper case is
/// lowered) and appear once; a line without a name or command is an
/// error with its number.
///
/// ```
/// use omnidev_pod::init::parse_procfile;
/// let p = parse_procfile("# app\nWeb: bin/web -p $PORT\r\n\nrelease: ./migrate\n", "Procfile".as_ref()).unwrap();
/// assert_eq!(p[0].name, "web");
/// assert_eq!(p[0].command, "bin/web -p $PORT");
/// assert_eq!(p[1].name, "release");
/// let err = parse_procfile("web bin/web\n", "Procfile".as_ref()).unwrap_err();
/// assert!(err.to_string().starts_with("Procfile:1: "), "{err}");
/// ```
pub fn parse_procfile(text: &str, path: &Path) -> Result<Vec<Process>> {
    let error =
        |line: usize, message: String| Error::Procfile { path: path.to_path_buf(), line, message };
    let mut processes: Vec<Process> = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let number = index + 1;
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if line.contains('\0') {
            return Err(error(
                number,
                "holds a NUL byte, which no command can be given".to_owned(),
            ));
        }
        let Some((name, command)) = line.split_once(':') else {
            return Err(error(
                number,
                format!("{} is not `name: command`", crate::names::shown(line)),
            ));
        };
        let name = name.trim().to_ascii_lowercase();
        crate::names::check("process name", &name).map_err(|bad| error(number, bad.to_string()))?;
        let command = command.trim();
        if command.is_empty() {
            return Err(error(number, format!("process `{name}` has no command")));
        }
        if processes.iter().any(|p| p.name == name) {
            return Err(error(number, format!("process `{name}` is declared twice")));
        }
        processes.push(Process { name, command: command.to_owned() });
    }
    if processes.is_empty() {
        return Err(error(0, "declares no process".to_owned()));
    }
    let long_running = processes.iter().filter(|p| p.name != RELEASE).count();
    if long_running == 0 {
        return Err(error(0, "declares only a `release` process".to_owned()));
    }
    if FIRST_BASE as usize + (long_running - 1) * 100 > usize::from(u16::MAX) {
        return Err(error(
            0,
            format!("declares {long_running} processes; at most 606 get a port each"),
        ));
    }
    Ok(processes)
}

/// The header every written profile starts with.
fn header(from: &str) -> String {
    format!(
        "# The pod of this checkout for omnidev, written by `omnidev init`{from}.\n\
         # `omnidev profile check` checks it without running anything; `omnidev`\n\
         # runs it. `omnidev help profile` prints the whole format.\n"
    )
}

/// A TOML basic string holding `value` verbatim.
fn toml_string(value: &str) -> String {
    toml::Value::String(value.to_owned()).to_string()
}

/// `value` with its braces doubled, so a template renders it unchanged.
fn literal(value: &str) -> String {
    value.replace('{', "{{").replace('}', "}}")
}

/// The profile text for `processes` (as [`parse_procfile`] gives them) in
/// a checkout laid out as `layout` says.
pub fn from_procfile(processes: &[Process], layout: &Layout) -> String {
    let release = processes.iter().any(|p| p.name == RELEASE);
    let mut text = header(" from its Procfile");
    text.push_str(
        "#\n\
         # Each Procfile process is a service with a port of its own, given to it\n\
         # as $PORT as foreman does. A base is where the search starts: another\n\
         # pod holding it moves this pod's port up to a free one.\n",
    );
    text.push_str(&notes_comment(layout));
    text.push_str(&pod_table(layout));
    text.push_str("\n[ports]\n");
    let mut base = FIRST_BASE;
    for process in processes.iter().filter(|p| p.name != RELEASE) {
        let _ = writeln!(text, "{} = {base}", process.name);
        base = base.saturating_add(100);
    }
    // The one process that makes the venv: the release step when there
    // is one (the others wait for it), else the first.
    let python = layout
        .python
        .then(|| processes.iter().find(|p| p.name == RELEASE).or(processes.first()))
        .flatten()
        .map(|p| p.name.clone());
    // Its own service gets the venv from `python-deps`; the others here.
    text.push_str(&env_table(layout, python.is_some() && processes.len() > 1));
    if processes.iter().any(|p| p.name == WEB) {
        let _ = write!(
            text,
            "\n[urls]\n{WEB} = {{ url = \"http://localhost:{{port.{WEB}}}\", service = \"{WEB}\" }}\n"
        );
    }
    let watch = if layout.sources.is_empty() {
        "# No source directory was found at the checkout's root; add a watch rule\n\
         # to restart it when files change: watch = [\"src/**\"]\n"
            .to_owned()
    } else {
        let rules: Vec<String> =
            layout.sources.iter().map(|dir| toml_string(&format!("{dir}/**"))).collect();
        format!(
            "# Restarted when a file under these changes (uncomment to use):\n\
             # watch = [{}]\n",
            rules.join(", ")
        )
    };
    for process in processes {
        let name = &process.name;
        let command = toml_string(&literal(&process.command));
        let _ = write!(text, "\n[services.{name}]\n");
        if name == RELEASE {
            text.push_str(
                "# The Procfile's release step: runs once at start; the others start\n\
                 # after it has exited 0 (`omnidev restart release` runs it again).\n",
            );
        }
        let _ = writeln!(text, "command = [\"sh\", \"-c\", {command}]");
        if python.as_ref() == Some(name) {
            text.push_str(
                "python-deps = true                  # makes .venv first (uv), when stale\n",
            );
        }
        if name == RELEASE {
            text.push_str("restart = \"never\"\n");
            continue;
        }
        let _ = writeln!(text, "env = {{ PORT = \"{{port.{name}}}\" }}");
        if release {
            let _ = writeln!(text, "depends-on = {{ {RELEASE} = \"completed\" }}");
        } else if let Some(first) = python.as_ref().filter(|first| *first != name) {
            // Started once its prepare step has made the venv.
            let _ = writeln!(text, "depends-on = {{ {first} = \"started\" }}");
        }
        if name == WEB {
            let _ = writeln!(
                text,
                "ready = {{ tcp = \"127.0.0.1:{{port.{name}}}\" }}   # ready once it listens on $PORT"
            );
        } else {
            let _ = writeln!(
                text,
                "# Ready once it listens on $PORT (a process that serves one):\n\
                 # ready = {{ tcp = \"127.0.0.1:{{port.{name}}}\" }}"
            );
        }
        text.push_str(&watch);
    }
    text.push_str(&layout.wiring.database_tables());
    text
}

/// What init took from the compose, dotenv and `app.json` files and what
/// not, as comments (every control shown visibly: a TOML comment holds
/// none).
fn notes_comment(layout: &Layout) -> String {
    let notes = &layout.wiring.notes;
    if notes.is_empty() {
        return String::new();
    }
    let mut text =
        String::from("#\n# What `omnidev init` took from the app's other files, and what not:\n");
    for note in notes {
        let _ = writeln!(text, "#   {}", omnidev_core::text::quote(note));
    }
    text
}

/// The `[pod]` table: `.env` loaded for every service when there is one
/// (or an example to copy it from), and the example's variables omnidev
/// cannot know.
fn pod_table(layout: &Layout) -> String {
    let wiring = &layout.wiring;
    if !layout.dotenv && !wiring.example {
        return String::new();
    }
    let mut text = String::from(
        "\n# .env is loaded for every service, as foreman and honcho load it\n\
         # ([env] below wins over it).\n[pod]\nenv-files = [\".env\"]\n",
    );
    if !wiring.expected.is_empty() {
        text.push_str(
            "# What the app reads that omnidev cannot know (`omnidev profile check`\n\
             # names those unset); the example's values:\n",
        );
        for (key, value) in &wiring.expected {
            let _ = writeln!(text, "#   {key} = {}", toml_string(value));
        }
        let keys: Vec<String> = wiring.expected.iter().map(|(k, _)| toml_string(k)).collect();
        let _ = writeln!(text, "expected-env = [{}]", keys.join(", "));
    }
    text
}

/// The `[env]` table: the venv's variables when `venv`, and the variables
/// pointed at the pod's databases.
fn env_table(layout: &Layout, venv: bool) -> String {
    let wiring = &layout.wiring;
    if !venv && wiring.env.is_empty() {
        return String::new();
    }
    let mut text = String::from("\n[env]\n");
    if venv {
        text.push_str(
            "# Every service runs with the checkout's venv, which the prepare step\n\
             # of `python-deps` makes and keeps up to date.\n\
             VIRTUAL_ENV = \"{repo}/.venv\"\n\
             PATH = \"{repo}/.venv/bin:{env.PATH}\"\n",
        );
    }
    if !wiring.env.is_empty() {
        text.push_str(
            "# The app's database URLs and addresses, pointed at the pod's own\n\
             # databases (below):\n\
             # every service starts once those are ready.\n",
        );
        for (key, template) in &wiring.env {
            let _ = writeln!(text, "{key} = {}", toml_string(template));
        }
    }
    text
}

/// The profile text for a checkout without a Procfile: one service to
/// edit, and what `layout` found.
pub fn generic(layout: &Layout) -> String {
    let mut text = header("");
    text.push_str(
        "#\n\
         # Replace the command of `app` with the one that runs your program, and\n\
         # add a `[services.NAME]` table for each other process.\n\n\
         [ports]\n\
         app = 8000                  # where the search for a free port starts\n\n\
         [services.app]\n\
         command = [\"sh\", \"-c\", \"echo 'app: put your command in omnidev.toml'; exec sleep 2147483647\"]\n\
         env = { PORT = \"{port.app}\" }\n\
         # ready = { http = \"http://127.0.0.1:{port.app}/\" }  # ready once this answers 2xx\n\
         # watch = [\"src/**\"]        # a change to these files restarts it\n\
         # depends-on = { db = \"ready\" }  # started | ready | completed\n",
    );
    text.push_str(&notes_comment(layout));
    text.push_str(&pod_table(layout));
    text.push_str(&env_table(layout, false));
    text.push_str(&layout.wiring.database_tables());
    text
}

/// Writes `<repo>/omnidev.toml`: from the Procfile `procfile` names
/// (relative to the checkout, or absolute), else from `<repo>/Procfile.dev`
/// or `<repo>/Procfile` (the first that exists), else [`generic`]. An
/// existing file (or anything at that name) is left alone
/// ([`Error::ProfileExists`]) unless `force`, which replaces it atomically
/// and keeps its mode. A new file is created exclusively, so a file
/// appearing meanwhile is never overwritten either.
pub fn write(repo: &Path, procfile: Option<&Path>, force: bool) -> Result<Written> {
    let path = repo.join(PROFILE_FILE);
    let existing = path.symlink_metadata().ok();
    if existing.is_some() && !force {
        return Err(Error::ProfileExists { path });
    }
    let mut layout = Layout::of(repo);
    let found = read_procfile(repo, procfile)?;
    let (text, services, procfile) = if let Some((procfile_path, text)) = found {
        let processes = parse_procfile(&text, &procfile_path)?;
        let names: Vec<String> = processes.iter().map(|p| p.name.clone()).collect();
        layout.wiring = wiring::Wiring::of(repo, &names);
        let text = from_procfile(&processes, &layout);
        (text, names, Some(procfile_path))
    } else {
        let names = vec!["app".to_owned()];
        layout.wiring = wiring::Wiring::of(repo, &names);
        (generic(&layout), names, None)
    };
    if let Some(old) = &existing {
        omnidev_core::fs::write_atomic(&path, text.as_bytes())
            .map_err(Error::io("write", &path))?;
        if old.is_file() {
            // The replaced file's mode, as a new one gets the umask's.
            std::fs::set_permissions(&path, old.permissions())
                .map_err(Error::io("set the mode of", &path))?;
        }
    } else {
        create_new(&path, text.as_bytes())?;
    }
    Ok(Written {
        path,
        procfile,
        services,
        databases: (layout.wiring.databases.iter())
            .map(|db| format!("{} ({})", db.name, db.engine.word()))
            .collect(),
        notes: layout.wiring.notes,
        replaced: existing.is_some(),
    })
}

/// The Procfile to read and its text: `named` (which must exist), else
/// `Procfile.dev`, else `Procfile` at the root of `repo`; `None` when
/// neither exists.
fn read_procfile(repo: &Path, named: Option<&Path>) -> Result<Option<(PathBuf, String)>> {
    let candidates: Vec<PathBuf> = match named {
        Some(named) => vec![repo.join(named)],
        None => vec![repo.join(PROCFILE_DEV), repo.join(PROCFILE)],
    };
    for path in candidates {
        let bytes = omnidev_core::fs::read_linked(&path, MAX_PROCFILE_BYTES)
            .map_err(Error::io("read", &path))?;
        let Some(bytes) = bytes else {
            if named.is_some() {
                return Err(Error::io("read", &path)(std::io::ErrorKind::NotFound.into()));
            }
            continue;
        };
        let text = String::from_utf8(bytes).map_err(|_| Error::Procfile {
            path: path.clone(),
            line: 0,
            message: "is not UTF-8 text".to_owned(),
        })?;
        return Ok(Some((path, text)));
    }
    Ok(None)
}

/// Creates `path` with `contents`, refusing if anything is there; a
/// failed write removes the file it created.
fn create_new(path: &Path, contents: &[u8]) -> Result<()> {
    let mut file = match std::fs::OpenOptions::new().write(true).create_new(true).open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            return Err(Error::ProfileExists { path: path.to_path_buf() });
        }
        Err(e) => return Err(Error::io("create", path)(e)),
    };
    if let Err(e) = file.write_all(contents).and_then(|()| file.sync_all()) {
        let _ = std::fs::remove_file(path);
        return Err(Error::io("write", path)(e));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn braces_and_quotes_in_a_command_survive_the_template() {
        let processes =
            parse_procfile("web: echo \"{a}\" '\\n' $PORT\n", Path::new("Procfile")).expect("ok");
        let text = from_procfile(&processes, &Layout::default());
        let profile = crate::Profile::parse(&text, "omnidev.toml").expect("ok");
        let command = profile.services["web"].command.clone().expect("ok");
        assert_eq!(command[2], "echo \"{{a}}\" '\\n' $PORT");
    }

    #[test]
    fn bad_procfiles_name_the_line() {
        let cases = [
            ("web: a\nweb: b\n", "Procfile:2: process `web` is declared twice"),
            ("web:\n", "Procfile:1: process `web` has no command"),
            ("# only\n\n", "Procfile: declares no process"),
            ("release: ./m\n", "Procfile: declares only a `release` process"),
            (
                "a: x\nweb: echo a\0b\n",
                "Procfile:2: holds a NUL byte, which no command can be given",
            ),
        ];
        for (text, want) in cases {
            let err = parse_procfile(text, Path::new("Procfile")).expect_err("an error");
            assert_eq!(err.to_string(), want);
        }
        let err = parse_procfile("_x: a\n", Path::new("Procfile")).expect_err("an error");
        assert!(err.to_string().starts_with("Procfile:1: invalid process name"), "{err}");
    }

    #[test]
    fn the_generic_template_parses() {
        let profile =
            crate::Profile::parse(&generic(&Layout::default()), "omnidev.toml").expect("ok");
        assert_eq!(profile.services.len(), 1);
        assert_eq!(profile.ports["app"], 8000);
    }
}
