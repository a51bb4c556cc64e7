//! Running omnidev as an unprivileged user, for what refuses root (a pod's
//! Postgres and MariaDB): as root, the user `omnidev-e2e` (made when
//! missing) through `runuser`; otherwise this user. Everything is in a
//! directory of the user's, removed when dropped.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, ensure};

/// The user the servers run as when this runs as root.
const USER: &str = "omnidev-e2e";

/// Who runs omnidev, and the directory of theirs everything is in.
#[derive(Debug)]
pub struct AsUser {
    /// `runuser -u USER` when this runs as root.
    user: Option<&'static str>,
    /// The user's directory: a copy of the binary, `home`, `run`, `bin`.
    pub dir: PathBuf,
    omnidev: PathBuf,
}

impl AsUser {
    /// The user, with `dir` (made) and a copy of `omnidev` in it.
    pub fn new(dir: PathBuf, omnidev: &Path) -> Result<Self> {
        std::fs::create_dir_all(&dir)?;
        let copy = dir.join("omnidev");
        // The user may not reach the build's directory: a copy of the
        // binary in a directory of theirs (never a hard link: giving the
        // directory to the user would give the build's file too).
        std::fs::copy(omnidev, &copy)?;
        let mut this = Self { user: None, dir, omnidev: copy };
        if !nix::unistd::geteuid().is_root() {
            return Ok(this);
        }
        let quiet =
            |command: &mut Command| command.stdout(Stdio::null()).stderr(Stdio::null()).status();
        if !quiet(Command::new("id").arg(USER))?.success() {
            let made = quiet(Command::new("useradd").args([
                "--system",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
                USER,
            ]))?;
            ensure!(made.success(), "useradd {USER} failed");
        }
        this.user = Some(USER);
        this.give(&this.dir.clone())?;
        Ok(this)
    }

    /// The user's copy of the binary.
    pub fn omnidev_path(&self) -> &Path {
        &self.omnidev
    }

    /// Makes the user's directories and gives them (and `inside`, which
    /// must be in the user's directory) to the user.
    pub fn give(&self, inside: &Path) -> Result<()> {
        ensure!(inside.starts_with(&self.dir), "{} is not the user's", inside.display());
        for dir in ["home/.cache", "home/.config", "run", "bin"] {
            std::fs::create_dir_all(self.dir.join(dir))?;
        }
        if let Some(user) = self.user {
            let owned = Command::new("chown").args(["-R", user]).arg(&self.dir).status()?;
            ensure!(owned.success(), "chown of {} failed", self.dir.display());
        }
        std::fs::set_permissions(
            self.dir.join("run"),
            std::os::unix::fs::PermissionsExt::from_mode(0o700),
        )?;
        Ok(())
    }

    /// A git repository `main` of the user's with `profile` as its
    /// `omnidev.toml`, committed, and a worktree `worktree` of it on a new
    /// branch: the two checkouts, given to the user.
    pub fn repo_and_worktree(
        &self,
        main: &str,
        profile: &str,
        worktree: &str,
    ) -> Result<(PathBuf, PathBuf)> {
        let src = self.dir.join(main);
        std::fs::create_dir_all(&src)?;
        std::fs::write(src.join("omnidev.toml"), profile)?;
        let dst = self.dir.join(worktree);
        let dst_arg = dst.to_str().context("a path that is text")?;
        for args in [
            &["init", "-q", "-b", "main"][..],
            &["add", "-A"],
            &["commit", "-q", "-m", "omnidev.toml"],
            &["worktree", "add", "-q", "-b", "new", dst_arg],
        ] {
            let done = Command::new("git")
                .args(["-c", "user.email=xtask@omnidev", "-c", "user.name=xtask"])
                .args(args)
                .current_dir(&src)
                .output()?;
            ensure!(
                done.status.success(),
                "git {args:?}: {}",
                String::from_utf8_lossy(&done.stderr)
            );
        }
        self.give(&src)?;
        self.give(&dst)?;
        Ok((src, dst))
    }

    /// `omnidev ARGS` in `repo` as the user: `env` (a caller's own, such
    /// as a test's tag) with the user's home, XDG directories, its `bin`
    /// first on `PATH`, and no shared uv or npm cache of another user.
    pub fn omnidev(&self, mut env: Vec<(String, String)>, repo: &Path, args: &[&str]) -> Command {
        let home = self.dir.join("home");
        let mine = [
            ("HOME", home.clone()),
            ("XDG_CACHE_HOME", home.join(".cache")),
            ("XDG_CONFIG_HOME", home.join(".config")),
            ("XDG_DATA_HOME", home.join(".local/share")),
            ("XDG_STATE_HOME", home.join(".local/state")),
            ("XDG_RUNTIME_DIR", self.dir.join("run")),
        ];
        for (name, value) in &mine {
            env.retain(|(k, _)| k != name);
            env.push(((*name).to_owned(), value.to_string_lossy().into_owned()));
        }
        env.retain(|(k, _)| !k.starts_with("UV_") && !k.starts_with("npm_config"));
        // The user's own copy of uv first; Python from the machine (the
        // user cannot reach the one uv fetched for another user).
        let path = format!(
            "{}:{}",
            self.dir.join("bin").display(),
            std::env::var("PATH").unwrap_or_default()
        );
        env.push(("PATH".into(), path));
        env.push(("UV_PYTHON_DOWNLOADS".into(), "never".into()));
        let mut command = if let Some(user) = self.user {
            let mut command = Command::new("runuser");
            command.args(["-u", user, "--", "env"]);
            command.args(env.iter().map(|(k, v)| format!("{k}={v}")));
            command.arg(&self.omnidev);
            command
        } else {
            let mut command = Command::new(&self.omnidev);
            command.envs(env);
            command
        };
        command.args(args).current_dir(repo).stdin(Stdio::null());
        command
    }
}

impl Drop for AsUser {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
