//! The web package manager: detected from the lockfile, found on PATH.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// A JavaScript package manager.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PackageManager {
    /// npm (the default when no other lockfile is present).
    Npm,
    /// pnpm (`pnpm-lock.yaml`).
    Pnpm,
    /// Yarn (`yarn.lock`).
    Yarn,
    /// Bun (`bun.lockb` or `bun.lock`).
    Bun,
}

impl PackageManager {
    /// Detects the package manager of `web_dir` from its lockfile:
    /// `pnpm-lock.yaml` → pnpm, `yarn.lock` → yarn, `bun.lockb`/`bun.lock` →
    /// bun, else npm.
    ///
    /// ```
    /// use omnidev_pod::PackageManager;
    /// let tmp = tempfile::tempdir().unwrap();
    /// assert_eq!(PackageManager::detect(tmp.path()), PackageManager::Npm);
    /// std::fs::write(tmp.path().join("yarn.lock"), "").unwrap();
    /// assert_eq!(PackageManager::detect(tmp.path()), PackageManager::Yarn);
    /// ```
    pub fn detect(web_dir: &Path) -> Self {
        if web_dir.join("pnpm-lock.yaml").is_file() {
            Self::Pnpm
        } else if web_dir.join("yarn.lock").is_file() {
            Self::Yarn
        } else if web_dir.join("bun.lockb").is_file() || web_dir.join("bun.lock").is_file() {
            Self::Bun
        } else {
            Self::Npm
        }
    }

    /// The program name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Npm => "npm",
            Self::Pnpm => "pnpm",
            Self::Yarn => "yarn",
            Self::Bun => "bun",
        }
    }

    /// The manifest and lockfiles whose change makes `node_modules/` stale.
    pub fn manifests(self) -> &'static [&'static str] {
        match self {
            Self::Npm => &["package.json", "package-lock.json", "npm-shrinkwrap.json"],
            Self::Pnpm => &["package.json", "pnpm-lock.yaml"],
            Self::Yarn => &["package.json", "yarn.lock"],
            Self::Bun => &["package.json", "bun.lockb", "bun.lock"],
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
            return Ok(Invocation {
                manager: self,
                program,
                prefix: Vec::new(),
            });
        }
        if matches!(self, Self::Pnpm | Self::Yarn)
            && let Some(program) = which("corepack", path)
        {
            return Ok(Invocation {
                manager: self,
                program,
                prefix: vec![self.name().to_owned()],
            });
        }
        let (tool, hint) = match self {
            Self::Npm => (
                "npm".to_owned(),
                "install Node.js (which ships npm)".to_owned(),
            ),
            Self::Pnpm | Self::Yarn => (
                format!("{} (or corepack)", self.name()),
                format!(
                    "install {0}, or run `corepack enable` with Node.js installed",
                    self.name()
                ),
            ),
            Self::Bun => (
                "bun".to_owned(),
                "install Bun from https://bun.sh".to_owned(),
            ),
        };
        Err(Error::PackageManagerMissing {
            tool,
            dir: web_dir.to_path_buf(),
            hint,
        })
    }
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

    /// Arguments for `install`.
    pub fn install_args(&self) -> Vec<String> {
        let mut out = self.prefix.clone();
        out.push("install".to_owned());
        out
    }

    /// The program as a string for a [`omnidev_core::CommandSpec`].
    pub fn program_string(&self) -> String {
        self.program.to_string_lossy().into_owned()
    }
}

/// The first executable file called `name` in the `PATH`-style list `path`.
pub fn which(name: &str, path: &OsStr) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    std::env::split_paths(path)
        .filter(|dir| !dir.as_os_str().is_empty())
        .map(|dir| dir.join(name))
        .find(|candidate| {
            candidate
                .metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_tool(dir: &Path, name: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.join(name);
        std::fs::write(&path, "#!/bin/sh\n").expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        path
    }

    #[test]
    fn detection_order() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let d = tmp.path();
        std::fs::write(d.join("bun.lock"), "").expect("write");
        assert_eq!(PackageManager::detect(d), PackageManager::Bun);
        std::fs::write(d.join("yarn.lock"), "").expect("write");
        assert_eq!(PackageManager::detect(d), PackageManager::Yarn);
        std::fs::write(d.join("pnpm-lock.yaml"), "").expect("write");
        assert_eq!(PackageManager::detect(d), PackageManager::Pnpm);
    }

    #[test]
    fn corepack_stands_in_for_pnpm_and_yarn_only() {
        let bin = tempfile::tempdir().expect("tempdir");
        let corepack = fake_tool(bin.path(), "corepack");
        let path = bin.path().as_os_str();
        let pnpm = PackageManager::Pnpm
            .resolve(path, Path::new("web"))
            .expect("pnpm");
        assert_eq!(pnpm.program, corepack);
        assert_eq!(
            pnpm.run_script_args("dev", &["--x".into()]),
            ["pnpm", "run", "dev", "--x"]
        );
        let err = PackageManager::Npm
            .resolve(path, Path::new("web"))
            .expect_err("npm");
        let text = format!(
            "{err} {:?}",
            miette::Diagnostic::help(&err).map(|h| h.to_string())
        );
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
        let inv = PackageManager::Yarn
            .resolve(&path, Path::new("web"))
            .expect("yarn");
        assert_eq!(inv.program, yarn);
        assert!(inv.prefix.is_empty());
        assert_eq!(inv.install_args(), ["install"]);
    }
}
