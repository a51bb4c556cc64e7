//! Python in a pod: `{python}`, the version a pod's `uv run` pins, from
//! the checkout's `.python-version` (else 3.12), so an exported
//! `UV_PYTHON` cannot move the pod's `.venv` to another interpreter; and
//! `python-deps`, the prepare step that makes a service's `.venv` with uv.

use std::path::{Path, PathBuf};

use omnidev_core::{CommandSpec, Env, PrepareStep, PrepareWhen};

use crate::error::{Error, Result};

/// The version pinned when the checkout has no `.python-version`.
pub const DEFAULT_PYTHON: &str = "3.12";

/// Most bytes of `.python-version` read, and most characters of a version.
const MAX_FILE: u64 = 4096;
const MAX_VERSION: usize = 64;

/// The pinned version, or why `.python-version` cannot give one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PythonPin(pub Result<String, BadPin>);

/// Why `.python-version` gives no version: its path, what is wrong and
/// what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadPin {
    /// The file is there but cannot be read as text.
    #[error("cannot read {}: {reason}", path.display())]
    Unreadable {
        /// `.python-version`.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// Its first version line is no version uv would take.
    #[error(
        "{} holds `{shown}`, which is not a Python version (at most {MAX_VERSION} printable \
         characters, such as `3.12`); fix the file or remove it (then {DEFAULT_PYTHON} is used)",
        path.display()
    )]
    NotAVersion {
        /// `.python-version`.
        path: PathBuf,
        /// The line, cut at 64 characters and escaped.
        shown: String,
    },
}

impl Default for PythonPin {
    fn default() -> Self {
        Self(Ok(DEFAULT_PYTHON.to_owned()))
    }
}

impl PythonPin {
    /// The first version line (not empty, not a `#` comment) of
    /// `<repo>/.python-version`, as uv reads it; [`DEFAULT_PYTHON`] when
    /// the file is missing or holds none.
    ///
    /// ```
    /// use omnidev_pod::python::PythonPin;
    /// let repo = tempfile::tempdir().unwrap();
    /// assert_eq!(PythonPin::of_checkout(repo.path()).0.unwrap(), "3.12");
    /// std::fs::write(repo.path().join(".python-version"), "# pinned\n3.13\n").unwrap();
    /// assert_eq!(PythonPin::of_checkout(repo.path()).0.unwrap(), "3.13");
    /// ```
    pub fn of_checkout(repo: &Path) -> Self {
        let path = repo.join(".python-version");
        let read = omnidev_core::fs::read_linked(&path, MAX_FILE).and_then(omnidev_core::fs::text);
        let text = match read {
            Ok(Some(text)) => text,
            Ok(None) => return Self::default(),
            Err(reason) => {
                return Self(Err(BadPin::Unreadable { path, reason: reason.to_string() }));
            }
        };
        let Some(version) =
            text.lines().map(str::trim).find(|line| !line.is_empty() && !line.starts_with('#'))
        else {
            return Self::default();
        };
        let valid = version.len() <= MAX_VERSION
            && version
                .chars()
                .all(|c| c.is_ascii_graphic() && !matches!(c, '\'' | '"' | '`' | '\\'));
        if valid {
            Self(Ok(version.to_owned()))
        } else {
            let cut: String = version.chars().take(MAX_VERSION).collect();
            Self(Err(BadPin::NotAVersion { path, shown: cut.escape_debug().to_string() }))
        }
    }
}

/// The directory `python-deps` makes in a service's `cwd`, as uv names it.
pub const VENV: &str = ".venv";

/// How the venv of a Python project is made up to date.
struct Recipe {
    /// The step's label.
    name: &'static str,
    program: &'static str,
    args: Vec<String>,
    /// The files whose change makes the venv stale.
    sources: Vec<PathBuf>,
}

/// The [`Recipe`] of `cwd`: `uv sync` where the project is described by a
/// `pyproject.toml` or a `uv.lock`; else a venv (`uv venv`, which reads
/// `.python-version`) and `uv pip install -r` of every `requirements*.txt`,
/// in name order. `None` when `cwd` has none of them.
fn recipe(cwd: &Path) -> Option<Recipe> {
    let project: Vec<PathBuf> = ["pyproject.toml", "uv.lock"]
        .iter()
        .map(|name| cwd.join(name))
        .filter(|path| path.is_file())
        .collect();
    if !project.is_empty() {
        return Some(Recipe {
            name: "uv sync",
            program: "uv",
            args: vec!["sync".to_owned()],
            sources: project,
        });
    }
    let requirements = requirements_files(cwd);
    if requirements.is_empty() {
        return None;
    }
    let mut script = format!("uv venv --allow-existing {VENV} && uv pip install --python {VENV}");
    for name in &requirements {
        script.push_str(" -r ");
        script.push_str(&omnidev_core::text::shell_word(name));
    }
    Some(Recipe {
        name: "uv pip install",
        program: "sh",
        args: vec!["-c".to_owned(), script],
        sources: requirements.iter().map(|name| cwd.join(name)).collect(),
    })
}

/// The `requirements*.txt` files of `dir`, by name.
fn requirements_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
                .filter(|name| {
                    name.starts_with("requirements")
                        && Path::new(name).extension().is_some_and(|e| e == "txt")
                })
                .filter(|name| dir.join(name).is_file())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// Whether `dir` holds a Python project `python-deps` can make a venv
/// for: a `pyproject.toml`, a `uv.lock` or a `requirements*.txt`.
pub fn is_project(dir: &Path) -> bool {
    recipe(dir).is_some()
}

/// `python-deps = true` of service `name` running in `cwd` with `env`: its
/// `env` gets the venv (`VIRTUAL_ENV`, and its `bin` first on `PATH`, the
/// one the service would get otherwise, `path` when it has none), and the
/// prepare step that makes the venv when it is missing or older than the
/// project's files (saying it still runs every `heartbeat` it is
/// silent). An error when `cwd` has no Python project files.
pub fn deps_step(
    name: &str,
    cwd: &Path,
    env: &mut Env,
    path: &str,
    heartbeat: std::time::Duration,
) -> Result<PrepareStep> {
    // `{repo}/.` as `{repo}`: the paths the service sees are plain.
    let cwd: PathBuf = cwd.components().collect();
    let cwd = cwd.as_path();
    let Some(recipe) = recipe(cwd) else {
        return Err(Error::Render {
            message: format!(
                "service `{name}` has `python-deps = true`, but {} holds no pyproject.toml, \
                 uv.lock or requirements*.txt; set its `cwd` to the Python project, or remove \
                 the key",
                cwd.display()
            ),
        });
    };
    let venv = cwd.join(VENV);
    let inherited = env.get("PATH").cloned().unwrap_or_else(|| path.to_owned());
    env.insert("PATH".to_owned(), format!("{}:{inherited}", venv.join("bin").display()));
    env.insert("VIRTUAL_ENV".to_owned(), venv.display().to_string());
    Ok(PrepareStep {
        name: recipe.name.to_owned(),
        command: CommandSpec {
            program: recipe.program.to_owned(),
            args: recipe.args,
            cwd: cwd.to_path_buf(),
            env: env.clone(),
        },
        when: PrepareWhen::Stale { target: venv, sources: recipe.sources },
        heartbeat,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pyproject (or uv.lock) means `uv sync`; else each
    /// requirements*.txt, by name and quoted when it must be, goes to
    /// `uv pip install -r`; a directory with neither has no recipe.
    #[test]
    fn the_project_files_choose_the_recipe() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert!(recipe(dir.path()).is_none());
        std::fs::write(dir.path().join("requirements.txt"), "django\n").expect("write");
        std::fs::write(dir.path().join("requirements dev.txt"), "pytest\n").expect("write");
        std::fs::write(dir.path().join("requirements.in"), "django\n").expect("write");
        let pip = recipe(dir.path()).expect("a recipe");
        assert_eq!((pip.name, pip.program), ("uv pip install", "sh"));
        assert_eq!(
            pip.args[1],
            "uv venv --allow-existing .venv && uv pip install --python .venv \
             -r 'requirements dev.txt' -r requirements.txt"
        );
        assert_eq!(pip.sources.len(), 2);
        std::fs::write(dir.path().join("pyproject.toml"), "[project]\n").expect("write");
        let sync = recipe(dir.path()).expect("a recipe");
        assert_eq!((sync.name, sync.program), ("uv sync", "uv"));
        assert_eq!(sync.sources, [dir.path().join("pyproject.toml")]);
    }

    #[test]
    fn a_hostile_or_unreadable_file_is_an_error_naming_it() {
        let repo = tempfile::tempdir().expect("tempdir");
        let file = repo.path().join(".python-version");
        std::fs::write(&file, "3.12 --index-url=http://evil\n").expect("write");
        let reason = PythonPin::of_checkout(repo.path()).0.expect_err("spaces");
        assert!(matches!(&reason, BadPin::NotAVersion { path, .. } if *path == file), "{reason}");
        assert!(reason.to_string().contains(".python-version"), "{reason}");
        std::fs::write(&file, "x".repeat(100_000)).expect("write");
        assert!(PythonPin::of_checkout(repo.path()).0.is_err());
        std::fs::write(&file, b"\xff\xfe").expect("write");
        let reason = PythonPin::of_checkout(repo.path()).0.expect_err("bytes");
        assert!(matches!(&reason, BadPin::Unreadable { path, .. } if *path == file), "{reason}");
        assert!(reason.to_string().contains("UTF-8"), "{reason}");
        std::fs::remove_file(&file).expect("remove");
        std::fs::create_dir(&file).expect("dir");
        assert!(PythonPin::of_checkout(repo.path()).0.is_err());
        std::fs::remove_dir(&file).expect("rmdir");
        std::fs::write(&file, "\n# nothing\n\n").expect("write");
        assert_eq!(PythonPin::of_checkout(repo.path()).0.as_deref(), Ok("3.12"));
        std::fs::write(&file, "cpython@3.12.7\n").expect("write");
        assert_eq!(PythonPin::of_checkout(repo.path()).0.as_deref(), Ok("cpython@3.12.7"));
    }
}
