//! [`TestContext`]: a temp directory holding a home (`HOME`, the XDG
//! directories and the runtime directory inside it) and a checkout, and
//! commands run with that environment only pointing inside it.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A temp home and checkout; removed when dropped.
#[derive(Debug)]
pub struct TestContext {
    /// The temp directory (removed on drop).
    pub temp: tempfile::TempDir,
    /// Its canonical path.
    pub root: PathBuf,
    /// `HOME`.
    pub home: PathBuf,
    /// The checkout (`repo/`, with a `.git` directory).
    pub repo: PathBuf,
}

impl Default for TestContext {
    fn default() -> Self {
        Self::new()
    }
}

impl TestContext {
    /// A context whose checkout (`repo/`) has a `.git` directory.
    pub fn new() -> Self {
        let temp = tempfile::tempdir().expect("tempdir");
        let root = temp.path().canonicalize().expect("canonical");
        let home = root.join("home");
        let repo = root.join("repo");
        let context = Self { temp, root, home, repo };
        for dir in
            [&context.home, &context.repo, &context.repo.join(".git"), &context.runtime_home()]
        {
            std::fs::create_dir_all(dir).expect("mkdir");
        }
        context
    }

    /// Gives the checkout the Omnigent shape (`omnigent/`, `web/`).
    pub fn omnigent_shape(&self) {
        std::fs::create_dir_all(self.repo.join("omnigent")).expect("mkdir");
        std::fs::create_dir_all(self.repo.join("web")).expect("mkdir");
    }

    /// Writes `contents` to `relative` in the checkout (directories made).
    pub fn write(&self, relative: &str, contents: &str) -> PathBuf {
        let path = self.repo.join(relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("mkdir");
        }
        std::fs::write(&path, contents).expect("write");
        path
    }

    /// `XDG_RUNTIME_DIR` (port registry, control sockets).
    pub fn runtime_home(&self) -> PathBuf {
        self.home.join(".run")
    }

    /// `XDG_CACHE_HOME`.
    pub fn cache_home(&self) -> PathBuf {
        self.home.join(".cache-xdg")
    }

    /// `XDG_CONFIG_HOME`.
    pub fn config_home(&self) -> PathBuf {
        self.home.join(".config-xdg")
    }

    /// omnidev's cache root, holding the pods.
    pub fn cache_root(&self) -> PathBuf {
        self.cache_home().join("omnidev")
    }

    /// The only pod directory under the cache root.
    pub fn pod_dir(&self) -> Option<PathBuf> {
        std::fs::read_dir(self.cache_root())
            .ok()?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .find(|p| p.is_dir())
    }

    /// Points `command`'s home, XDG and runtime directories inside the
    /// context, runs it in the checkout with no stdin, no colour and 100
    /// columns, and drops what would reach outside (`OMNIGENT_CONFIG_HOME`).
    pub fn isolate<'c>(&self, command: &'c mut Command) -> &'c mut Command {
        command
            .current_dir(&self.repo)
            .env("HOME", &self.home)
            .env("XDG_CACHE_HOME", self.cache_home())
            .env("XDG_CONFIG_HOME", self.config_home())
            .env("XDG_RUNTIME_DIR", self.runtime_home())
            .env("NO_COLOR", "1")
            .env_remove("OMNIGENT_CONFIG_HOME")
            .env_remove("OMNIDEV_LOG")
            .env("COLUMNS", "100")
            .stdin(Stdio::null())
    }

    /// `program` run inside the context ([`TestContext::isolate`]).
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        let mut command = Command::new(program);
        self.isolate(&mut command);
        command
    }

    /// Output as `exit code / stdout / stderr`, temp paths as `[TEMP]`.
    pub fn render(&self, output: &std::process::Output) -> String {
        let text = format!(
            "exit: {:?}\n--- stdout\n{}--- stderr\n{}",
            output.status.code(),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        self.filter(&text)
    }

    /// `text` with the temp directory as `[TEMP]`.
    pub fn filter(&self, text: &str) -> String {
        text.replace(&self.root.display().to_string(), "[TEMP]")
    }

    /// A path inside the context, shown as in [`TestContext::filter`].
    pub fn shown(&self, path: &Path) -> String {
        self.filter(&path.display().to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_sees_only_the_context_home() {
        let ctx = TestContext::new();
        let out = ctx
            .command("sh")
            .args(["-c", "echo $HOME $XDG_CACHE_HOME $XDG_RUNTIME_DIR; pwd"])
            .output()
            .expect("sh");
        let text = ctx.filter(&String::from_utf8_lossy(&out.stdout));
        assert_eq!(text, "[TEMP]/home [TEMP]/home/.cache-xdg [TEMP]/home/.run\n[TEMP]/repo\n");
    }
}
