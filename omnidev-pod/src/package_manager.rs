//! The web package manager: detected by walking from a service's directory
//! up to the checkout root, found on PATH (or through corepack).
//!
//! Detection looks at each directory from the service's `cwd` up to the
//! repository root, nearest first, and stops at the first one that holds a
//! lockfile or declares a workspace (`pnpm-workspace.yaml`, or a
//! `workspaces` field in `package.json`): that directory is where the
//! install runs. The manager is the nearest `packageManager` field
//! (`name@version`) seen on the way, else the lockfile's, else pnpm for a
//! `pnpm-workspace.yaml`, else npm. With neither a lockfile nor a workspace
//! anywhere, the install runs in the service's own directory. A workspace
//! declaration is taken to include the service's directory (omnidev does
//! not match workspace globs).

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use omnidev_core::fs::which;

use crate::error::{Error, Result};

/// A JavaScript package manager.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PackageManager {
    /// npm (the default when nothing else is declared).
    Npm,
    /// pnpm (`pnpm-lock.yaml`, `pnpm-workspace.yaml`).
    Pnpm,
    /// Yarn (`yarn.lock`).
    Yarn,
    /// Bun (`bun.lockb` or `bun.lock`).
    Bun,
}

/// Lockfile names, in the order they are looked for in one directory.
const LOCKFILES: &[(&str, PackageManager)] = &[
    ("pnpm-lock.yaml", PackageManager::Pnpm),
    ("yarn.lock", PackageManager::Yarn),
    ("bun.lock", PackageManager::Bun),
    ("bun.lockb", PackageManager::Bun),
    ("package-lock.json", PackageManager::Npm),
    ("npm-shrinkwrap.json", PackageManager::Npm),
];

/// `package.json` files larger than this are refused (a manifest is a few
/// kilobytes; this bounds what detection reads).
const MAX_MANIFEST_BYTES: u64 = 4 * 1024 * 1024;

impl PackageManager {
    /// The program name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Npm => "npm",
            Self::Pnpm => "pnpm",
            Self::Yarn => "yarn",
            Self::Bun => "bun",
        }
    }

    /// The package manager called `name` (as in a `packageManager` field or
    /// a profile's `package-manager`).
    ///
    /// ```
    /// use omnidev_pod::PackageManager;
    /// assert_eq!(PackageManager::from_name("pnpm"), Some(PackageManager::Pnpm));
    /// assert_eq!(PackageManager::from_name("cargo"), None);
    /// ```
    pub fn from_name(name: &str) -> Option<Self> {
        [Self::Npm, Self::Pnpm, Self::Yarn, Self::Bun].into_iter().find(|pm| pm.name() == name)
    }

    /// This manager's lockfile names.
    pub fn lockfiles(self) -> impl Iterator<Item = &'static str> {
        LOCKFILES.iter().filter(move |(_, pm)| *pm == self).map(|(name, _)| *name)
    }

    /// The Node.js range this manager's own `version` needs (from each
    /// release line's `engines.node`), when known: pnpm 11 needs 22.13,
    /// pnpm 9 and 10 need 18.12, Yarn 4 needs 18.12.
    ///
    /// ```
    /// use omnidev_pod::PackageManager;
    /// assert_eq!(PackageManager::Pnpm.node_requirement("11.15.1"), Some(">=22.13"));
    /// assert_eq!(PackageManager::Pnpm.node_requirement("10.34.9"), Some(">=18.12"));
    /// assert_eq!(PackageManager::Npm.node_requirement("11.0.0"), None);
    /// ```
    pub fn node_requirement(self, version: &str) -> Option<&'static str> {
        let major: u64 = version.split('.').next()?.parse().ok()?;
        match (self, major) {
            (Self::Pnpm, 11..) => Some(">=22.13"),
            (Self::Pnpm, 9..=10) | (Self::Yarn, 4..) => Some(">=18.12"),
            (Self::Pnpm, 8) => Some(">=16.14"),
            _ => None,
        }
    }

    /// Finds how to run this package manager on `path` (a `PATH`-style
    /// list): the binary itself, or for pnpm and yarn `corepack <pm>` when
    /// only corepack is installed. A missing tool is an error naming it and
    /// mentioning `--no-vite`.
    ///
    /// ```
    /// use omnidev_pod::PackageManager;
    /// let bin = tempfile::tempdir().unwrap();
    /// let err = PackageManager::Pnpm.resolve(bin.path().as_os_str(), bin.path()).unwrap_err();
    /// assert!(err.to_string().contains("pnpm"));
    /// ```
    pub fn resolve(self, path: &OsStr, web_dir: &Path) -> Result<Invocation> {
        if let Some(program) = which(self.name(), path) {
            return Ok(Invocation { manager: self, program, prefix: Vec::new() });
        }
        if matches!(self, Self::Pnpm | Self::Yarn)
            && let Some(program) = which("corepack", path)
        {
            return Ok(Invocation { manager: self, program, prefix: vec![self.name().to_owned()] });
        }
        let (tool, hint) = match self {
            Self::Npm => ("npm".to_owned(), "install Node.js (which ships npm)".to_owned()),
            Self::Pnpm | Self::Yarn => (
                format!("{} (or corepack)", self.name()),
                format!(
                    "install {0}, or run `corepack enable` with Node.js installed",
                    self.name()
                ),
            ),
            Self::Bun => ("bun".to_owned(), "install Bun from https://bun.sh".to_owned()),
        };
        Err(Error::PackageManagerMissing { tool, dir: web_dir.to_path_buf(), hint })
    }
}

/// What detection found for one service directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Detection {
    /// The package manager.
    pub manager: PackageManager,
    /// The version pinned by a `packageManager` field, if any.
    pub version: Option<String>,
    /// Where the install runs: the nearest directory with a lockfile or a
    /// workspace declaration, else the service's directory.
    pub root: PathBuf,
    /// What decided the manager, for messages (e.g. `packageManager
    /// "pnpm@11.15.1" in /src/app/package.json`).
    pub reason: String,
    /// Files whose change makes the install stale: every `package.json`
    /// from the service's directory up to `root`, `root`'s lockfiles and
    /// workspace file (missing ones included; they may appear later).
    pub inputs: Vec<PathBuf>,
    /// `engines.node` ranges found on the way, with the file declaring each.
    pub engines: Vec<(String, PathBuf)>,
}

impl Detection {
    /// The `node_modules/` whose age says whether the install is stale: the
    /// install root's (a workspace install may hoist everything there).
    pub fn target(&self) -> PathBuf {
        self.root.join("node_modules")
    }

    /// `name@version` when a version is pinned, else the name.
    pub fn label(&self) -> String {
        match &self.version {
            Some(version) => format!("{}@{version}", self.manager.name()),
            None => self.manager.name().to_owned(),
        }
    }
}

/// The fields of a `package.json` that detection reads.
#[derive(Debug, Default)]
struct Manifest {
    package_manager: Option<String>,
    workspaces: bool,
    engines_node: Option<String>,
}

fn read_manifest(path: &Path) -> Result<Option<Manifest>> {
    let invalid = |message: String| Error::Manifest { path: path.to_path_buf(), message };
    let Some(text) = omnidev_core::fs::read_linked(path, MAX_MANIFEST_BYTES)
        .and_then(omnidev_core::fs::text)
        .map_err(Error::io("read", path))?
    else {
        return Ok(None);
    };
    let value: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| invalid(format!("not valid JSON: {e}")))?;
    let string = |key: &str| -> Result<Option<String>> {
        match value.pointer(key) {
            None | Some(serde_json::Value::Null) => Ok(None),
            Some(serde_json::Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(invalid(format!(
                "`{}` is {other}, not a string",
                key.trim_start_matches('/').replace('/', ".")
            ))),
        }
    };
    Ok(Some(Manifest {
        package_manager: string("/packageManager")?,
        workspaces: value.get("workspaces").is_some(),
        engines_node: string("/engines/node")?,
    }))
}

/// Parses a `packageManager` value: `name@version`, optionally followed by
/// `+<hash>`.
fn parse_package_manager(value: &str, path: &Path) -> Result<(PackageManager, String)> {
    let invalid = |message: String| Error::Manifest { path: path.to_path_buf(), message };
    let (name, version) = value.split_once('@').ok_or_else(|| {
        invalid(format!(
            "`packageManager` is \"{}\", not `name@version`",
            omnidev_core::text::clip(value, 80)
        ))
    })?;
    let manager = PackageManager::from_name(name).ok_or_else(|| {
        invalid(format!(
            "`packageManager` names \"{}\"; omnidev knows npm, pnpm, yarn and bun \
             (set `package-manager` in the profile to choose one)",
            omnidev_core::text::clip(name, 80)
        ))
    })?;
    let version = version.split('+').next().unwrap_or_default();
    if version.is_empty()
        || version.len() > 64
        || !version.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-'))
    {
        return Err(invalid(format!(
            "`packageManager` has no plain version after `{name}@` (\"{}\")",
            omnidev_core::text::clip(value, 80)
        )));
    }
    Ok((manager, version.to_owned()))
}

/// The directories from `cwd` up to `repo_root`, nearest first; just `cwd`
/// when it is not inside `repo_root`.
fn levels(cwd: &Path, repo_root: &Path) -> Vec<PathBuf> {
    if !cwd.starts_with(repo_root) {
        return vec![cwd.to_path_buf()];
    }
    cwd.ancestors().take_while(|dir| dir.starts_with(repo_root)).map(Path::to_path_buf).collect()
}

/// Detects the package manager of the service running in `cwd`, walking up
/// to `repo_root` (see the module docs). `explicit` (a profile's
/// `package-manager`) overrides the manager; the install root is still
/// detected. An unreadable or malformed `package.json` on the way is an
/// error naming it.
///
/// ```
/// use omnidev_pod::package_manager::{detect, PackageManager};
/// let repo = tempfile::tempdir().unwrap();
/// let web = repo.path().join("web");
/// std::fs::create_dir(&web).unwrap();
/// std::fs::write(web.join("package.json"), "{}").unwrap();
/// std::fs::write(repo.path().join("package.json"), r#"{"packageManager": "pnpm@10.34.9"}"#).unwrap();
/// std::fs::write(repo.path().join("pnpm-workspace.yaml"), "packages: [web]\n").unwrap();
/// let found = detect(&web, repo.path(), None).unwrap();
/// assert_eq!(found.manager, PackageManager::Pnpm);
/// assert_eq!(found.root, repo.path());
/// assert_eq!(found.version.as_deref(), Some("10.34.9"));
/// ```
pub fn detect(cwd: &Path, repo_root: &Path, explicit: Option<PackageManager>) -> Result<Detection> {
    let mut declared: Option<(PackageManager, String, PathBuf)> = None;
    let mut inputs = Vec::new();
    let mut engines = Vec::new();
    let mut found = None;
    for dir in levels(cwd, repo_root) {
        let manifest_path = dir.join("package.json");
        let manifest = read_manifest(&manifest_path)?;
        inputs.push(manifest_path.clone());
        let manifest = manifest.unwrap_or_default();
        if let Some(range) = manifest.engines_node {
            engines.push((range, manifest_path.clone()));
        }
        if declared.is_none()
            && let Some(value) = &manifest.package_manager
        {
            let (manager, version) = parse_package_manager(value, &manifest_path)?;
            declared = Some((manager, version, manifest_path.clone()));
        }
        let lockfile = LOCKFILES.iter().copied().find(|(name, _)| dir.join(name).is_file());
        let pnpm_workspace = dir.join("pnpm-workspace.yaml").is_file();
        if lockfile.is_some() || pnpm_workspace || manifest.workspaces {
            found = Some((dir, lockfile, pnpm_workspace));
            break;
        }
    }
    let (root, from_lockfile, pnpm_workspace) =
        found.unwrap_or_else(|| (cwd.to_path_buf(), None, false));
    let (manager, version, reason) = if let Some(manager) = explicit {
        (manager, None, "`package-manager` in the profile".to_owned())
    } else if let Some((manager, version, path)) = declared {
        let reason =
            format!("packageManager \"{}@{version}\" in {}", manager.name(), path.display());
        (manager, Some(version), reason)
    } else if let Some((name, manager)) = from_lockfile {
        (manager, None, format!("{}", root.join(name).display()))
    } else if pnpm_workspace {
        (PackageManager::Pnpm, None, format!("{}", root.join("pnpm-workspace.yaml").display()))
    } else {
        (PackageManager::Npm, None, "no lockfile (npm)".to_owned())
    };
    inputs.extend(manager.lockfiles().map(|name| root.join(name)));
    if manager == PackageManager::Pnpm {
        inputs.push(root.join("pnpm-workspace.yaml"));
    }
    Ok(Detection { manager, version, root, reason, inputs, engines })
}

/// How to run a resolved package manager: `program prefix… <args>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invocation {
    /// Which package manager this runs.
    pub manager: PackageManager,
    /// The absolute path of the program (the package manager, or corepack).
    pub program: PathBuf,
    /// Arguments put before everything else (`["pnpm"]` through corepack).
    pub prefix: Vec<String>,
}

impl Invocation {
    /// Arguments for `run <script> <args…>`; npm needs `--` before the
    /// script's own flags, pnpm, yarn and bun pass them through directly.
    ///
    /// ```
    /// use omnidev_pod::package_manager::{Invocation, PackageManager};
    /// let npm = Invocation { manager: PackageManager::Npm, program: "/bin/npm".into(), prefix: vec![] };
    /// assert_eq!(npm.run_script_args("dev", &["--port".into(), "1".into()]), ["run", "dev", "--", "--port", "1"]);
    /// ```
    pub fn run_script_args(&self, script: &str, args: &[String]) -> Vec<String> {
        let mut out = self.prefix.clone();
        out.extend(["run".to_owned(), script.to_owned()]);
        if self.manager == PackageManager::Npm && !args.is_empty() {
            out.push("--".to_owned());
        }
        out.extend(args.iter().cloned());
        out
    }

    /// Arguments for `install`, narrowed to `filter` (a workspace package
    /// selector) when given: pnpm and bun take `--filter VALUE`, npm
    /// `--workspace VALUE` (a trailing `...` dropped), yarn has no such
    /// flag and installs the whole workspace.
    ///
    /// ```
    /// use omnidev_pod::package_manager::{Invocation, PackageManager};
    /// let pnpm = Invocation { manager: PackageManager::Pnpm, program: "/bin/pnpm".into(), prefix: vec![] };
    /// assert_eq!(pnpm.install_args(Some("web...")), ["install", "--filter", "web..."]);
    /// let npm = Invocation { manager: PackageManager::Npm, ..pnpm };
    /// assert_eq!(npm.install_args(Some("web...")), ["install", "--workspace", "web"]);
    /// ```
    pub fn install_args(&self, filter: Option<&str>) -> Vec<String> {
        let mut out = self.prefix.clone();
        out.push("install".to_owned());
        if let Some(filter) = filter {
            match self.manager {
                PackageManager::Pnpm | PackageManager::Bun => {
                    out.extend(["--filter".to_owned(), filter.to_owned()]);
                }
                PackageManager::Npm => {
                    let name = filter.trim_end_matches("...");
                    out.extend(["--workspace".to_owned(), name.to_owned()]);
                }
                PackageManager::Yarn => {}
            }
        }
        out
    }

    /// The program as a string for a [`omnidev_core::CommandSpec`].
    pub fn program_string(&self) -> String {
        self.program.to_string_lossy().into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_tool(dir: &Path, name: &str) -> PathBuf {
        omnidev_test_support::write_script(&dir.join(name), "")
    }

    /// A checkout at `<tmp>/repo` with `files` (relative path, contents)
    /// and an empty `web/package.json` unless given.
    fn layout(files: &[(&str, &str)]) -> (tempfile::TempDir, PathBuf) {
        let tmp = tempfile::tempdir().expect("tempdir");
        let repo = tmp.path().join("repo");
        std::fs::create_dir_all(repo.join("web")).expect("mkdir");
        std::fs::write(repo.join("web/package.json"), "{}").expect("write");
        for (path, text) in files {
            let path = repo.join(path);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            std::fs::write(path, text).expect("write");
        }
        (tmp, repo)
    }

    fn detect_web(repo: &Path) -> Detection {
        detect(&repo.join("web"), repo, None).expect("detect")
    }

    #[test]
    fn pnpm_workspace_root_like_omnigent() {
        let (_tmp, repo) = layout(&[
            (
                "package.json",
                r#"{"name": "omnigent", "private": true, "packageManager": "pnpm@11.15.1+sha512.abc"}"#,
            ),
            ("pnpm-workspace.yaml", "packages:\n  - web\n"),
            ("pnpm-lock.yaml", "lockfileVersion: '9.0'\n"),
        ]);
        let found = detect_web(&repo);
        assert_eq!(found.manager, PackageManager::Pnpm);
        assert_eq!(found.version.as_deref(), Some("11.15.1"));
        assert_eq!(found.label(), "pnpm@11.15.1");
        assert_eq!(found.root, repo);
        assert_eq!(found.target(), repo.join("node_modules"));
        for input in ["web/package.json", "package.json", "pnpm-lock.yaml", "pnpm-workspace.yaml"] {
            assert!(found.inputs.contains(&repo.join(input)), "{input}");
        }
        assert!(found.reason.contains("packageManager"), "{}", found.reason);
    }

    #[test]
    fn npm_workspaces_field_marks_the_root() {
        let (_tmp, repo) =
            layout(&[("package.json", r#"{"workspaces": ["web"]}"#), ("package-lock.json", "{}")]);
        let found = detect_web(&repo);
        assert_eq!(found.manager, PackageManager::Npm);
        assert_eq!(found.root, repo);
        assert!(found.inputs.contains(&repo.join("package-lock.json")));
        // A workspaces field without any lockfile still marks the root.
        std::fs::remove_file(repo.join("package-lock.json")).expect("rm");
        assert_eq!(detect_web(&repo).root, repo);
    }

    #[test]
    fn yarn_and_bun_lockfiles() {
        let (_tmp, repo) = layout(&[("yarn.lock", "")]);
        let found = detect_web(&repo);
        assert_eq!((found.manager, found.root.clone()), (PackageManager::Yarn, repo.clone()));
        assert!(found.inputs.contains(&repo.join("yarn.lock")));

        let (_tmp, repo) = layout(&[("web/bun.lock", "{}")]);
        let found = detect_web(&repo);
        assert_eq!(found.manager, PackageManager::Bun);
        assert_eq!(found.root, repo.join("web"));
        let (_tmp, repo) = layout(&[("web/bun.lockb", "")]);
        assert_eq!(detect_web(&repo).manager, PackageManager::Bun);
    }

    #[test]
    fn package_manager_field_without_a_lockfile() {
        let (_tmp, repo) = layout(&[("package.json", r#"{"packageManager": "yarn@4.5.0"}"#)]);
        let found = detect_web(&repo);
        assert_eq!(found.manager, PackageManager::Yarn);
        assert_eq!(found.version.as_deref(), Some("4.5.0"));
        // No lockfile or workspace anywhere: install where the service is.
        assert_eq!(found.root, repo.join("web"));
    }

    #[test]
    fn nearest_lockfile_wins_over_the_root_one() {
        let (_tmp, repo) = layout(&[
            ("pnpm-lock.yaml", ""),
            ("pnpm-workspace.yaml", "packages: [web]\n"),
            ("web/package-lock.json", "{}"),
        ]);
        let found = detect_web(&repo);
        assert_eq!(found.manager, PackageManager::Npm);
        assert_eq!(found.root, repo.join("web"));
        assert!(!found.inputs.contains(&repo.join("pnpm-lock.yaml")));
    }

    #[test]
    fn the_walk_stops_at_the_repository_root() {
        let tmp = tempfile::tempdir().expect("tempdir");
        std::fs::write(tmp.path().join("pnpm-lock.yaml"), "").expect("write");
        let repo = tmp.path().join("repo");
        std::fs::create_dir_all(repo.join("web")).expect("mkdir");
        let found = detect(&repo.join("web"), &repo, None).expect("detect");
        assert_eq!(found.manager, PackageManager::Npm);
        assert_eq!(found.root, repo.join("web"));
    }

    #[test]
    fn explicit_choice_overrides_and_engines_are_collected() {
        let (_tmp, repo) = layout(&[
            ("package.json", r#"{"engines": {"node": ">=22"}}"#),
            ("web/package.json", r#"{"engines": {"node": "^20.19.0 || >=22.12.0"}}"#),
            ("pnpm-lock.yaml", ""),
        ]);
        let found = detect(&repo.join("web"), &repo, Some(PackageManager::Bun)).expect("detect");
        assert_eq!(found.manager, PackageManager::Bun);
        assert_eq!(found.root, repo);
        assert_eq!(
            found.engines,
            [
                ("^20.19.0 || >=22.12.0".to_owned(), repo.join("web/package.json")),
                (">=22".to_owned(), repo.join("package.json")),
            ]
        );
    }

    #[test]
    fn malformed_manifests_are_errors_naming_the_file() {
        for (text, needle) in [
            ("{", "not valid JSON"),
            (r#"{"packageManager": "cargo@1.0.0"}"#, "cargo"),
            (r#"{"packageManager": "pnpm"}"#, "name@version"),
            (r#"{"packageManager": "pnpm@$(rm -rf)"}"#, "no plain version"),
            (r#"{"engines": {"node": 22}}"#, "engines.node"),
        ] {
            let (_tmp, repo) = layout(&[("package.json", text)]);
            let err = detect(&repo.join("web"), &repo, None).expect_err(text);
            let message = err.to_string();
            assert!(message.contains(needle), "{text}: {message}");
            assert!(
                message.contains(&repo.join("package.json").display().to_string()),
                "{message}"
            );
        }
    }

    #[test]
    fn corepack_stands_in_for_pnpm_and_yarn_only() {
        let bin = tempfile::tempdir().expect("tempdir");
        let corepack = fake_tool(bin.path(), "corepack");
        let path = bin.path().as_os_str();
        let pnpm = PackageManager::Pnpm.resolve(path, Path::new("web")).expect("pnpm");
        assert_eq!(pnpm.program, corepack);
        assert_eq!(pnpm.run_script_args("dev", &["--x".into()]), ["pnpm", "run", "dev", "--x"]);
        assert_eq!(pnpm.install_args(None), ["pnpm", "install"]);
        let err = PackageManager::Npm.resolve(path, Path::new("web")).expect_err("npm");
        let text = format!("{err} {:?}", miette::Diagnostic::help(&err).map(|h| h.to_string()));
        assert!(text.contains("npm") && text.contains("--no-vite"), "{text}");
    }

    #[test]
    fn binary_on_path_is_preferred_and_non_executables_skipped() {
        let a = tempfile::tempdir().expect("tempdir");
        let b = tempfile::tempdir().expect("tempdir");
        std::fs::write(a.path().join("yarn"), "not executable").expect("write");
        let yarn = fake_tool(b.path(), "yarn");
        fake_tool(b.path(), "corepack");
        let path = std::env::join_paths([a.path(), b.path()]).expect("join");
        let inv = PackageManager::Yarn.resolve(&path, Path::new("web")).expect("yarn");
        assert_eq!(inv.program, yarn);
        assert!(inv.prefix.is_empty());
        assert_eq!(inv.install_args(Some("web...")), ["install"]);
    }
}
