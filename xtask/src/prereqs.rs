//! The programs `cargo xtask ci` needs, checked on `PATH` before anything builds.

use std::ffi::OsStr;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The uv install that works on a PEP 668 system ("externally managed"
/// Python, Debian 12 / Ubuntu 24.04) without GitHub access: uv is a single
/// self-contained binary with no Python dependencies, so a user-site install
/// cannot break the system's packages. It lands in `~/.local/bin`.
pub const UV_INSTALL: &str = "python3 -m pip install --user --break-system-packages uv  \
                              (puts uv in ~/.local/bin; or `pipx install uv`)";

/// A step of `cargo xtask ci` that needs a program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// `cargo fmt --check` and clippy.
    Lint,
    /// `cargo test --workspace`.
    Test,
    /// `cargo xtask test-e2e`.
    E2e,
    /// `cargo xtask demo`.
    Demo,
}

/// How a missing program is installed when `cargo xtask ci` may install.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// `rustup component add NAME`.
    Rustup(&'static str),
    /// The Debian/Ubuntu package `NAME`, with apt-get as root.
    Apt(&'static str),
    /// uv, with `pip install --user`.
    Uv,
    /// pnpm at the version the bundled example pins, with npm.
    Pnpm,
    /// Not installed by xtask: the user follows `install`.
    Manual,
}

/// One program the CI needs.
#[derive(Debug, Clone, Copy)]
pub struct Prerequisite {
    /// The name users know it by.
    pub name: &'static str,
    /// The executable looked up on `PATH`.
    pub program: &'static str,
    /// Arguments that must exit 0, for programs that can be present but
    /// unusable (rustup's proxies when the component is not installed).
    pub probe: Option<&'static [&'static str]>,
    /// What needs it.
    pub used_by: &'static str,
    /// How to get it by hand.
    pub install: &'static str,
    /// How `cargo xtask ci` gets it.
    pub source: Source,
    /// The steps that run it.
    pub steps: &'static [Step],
}

use Step::{Demo, E2e, Lint, Test};

/// Everything `cargo xtask ci` runs, in the order it is reported.
pub const PREREQUISITES: &[Prerequisite] = &[
    Prerequisite {
        name: "cargo",
        program: "cargo",
        probe: None,
        used_by: "every step",
        install: "rustup: https://rustup.rs",
        source: Source::Manual,
        steps: &[Lint, Test, E2e, Demo],
    },
    Prerequisite {
        name: "rustfmt",
        program: "rustfmt",
        probe: Some(&["--version"]),
        used_by: "the fmt step",
        install: "rustup component add rustfmt",
        source: Source::Rustup("rustfmt"),
        steps: &[Lint],
    },
    Prerequisite {
        name: "clippy",
        program: "cargo-clippy",
        probe: Some(&["--version"]),
        used_by: "the clippy step",
        install: "rustup component add clippy",
        source: Source::Rustup("clippy"),
        steps: &[Lint],
    },
    Prerequisite {
        name: "git",
        program: "git",
        probe: None,
        used_by: "checkout and install tests",
        install: "apt-get install git",
        source: Source::Apt("git"),
        steps: &[Test, E2e],
    },
    Prerequisite {
        name: "python3",
        program: "python3",
        probe: None,
        used_by: "the example's services",
        install: "apt-get install python3",
        source: Source::Apt("python3"),
        steps: &[Test, E2e, Demo],
    },
    Prerequisite {
        name: "uv",
        program: "uv",
        probe: None,
        used_by: "install tests and the example's services",
        install: UV_INSTALL,
        source: Source::Uv,
        steps: &[Test, E2e, Demo],
    },
    Prerequisite {
        name: "zsh",
        program: "zsh",
        probe: None,
        used_by: "the shell-hook tests",
        install: "apt-get install zsh",
        source: Source::Apt("zsh"),
        steps: &[Test],
    },
    Prerequisite {
        name: "fish",
        program: "fish",
        probe: None,
        used_by: "the shell-hook tests",
        install: "apt-get install fish",
        source: Source::Apt("fish"),
        steps: &[Test],
    },
    Prerequisite {
        name: "tmux",
        program: "tmux",
        probe: None,
        used_by: "the TUI e2e",
        install: "apt-get install tmux",
        source: Source::Apt("tmux"),
        steps: &[E2e],
    },
    Prerequisite {
        name: "postgresql",
        program: "pg_ctlcluster",
        probe: None,
        used_by: "the database e2e (a pod's own Postgres, from Debian's server)",
        install: "apt-get install postgresql (then `service postgresql stop`: omnidev runs its own)",
        source: Source::Apt("postgresql"),
        steps: &[E2e],
    },
    Prerequisite {
        name: "mariadb-server",
        program: "mariadb-install-db",
        probe: None,
        used_by: "the database e2e (a pod's own MariaDB, from Debian's server)",
        install: "apt-get install mariadb-server (then `service mariadb stop`: omnidev runs its own)",
        source: Source::Apt("mariadb-server"),
        steps: &[E2e],
    },
    Prerequisite {
        name: "mariadb-backup",
        program: "mariadb-backup",
        probe: None,
        used_by: "the database e2e (a clone of a running MariaDB)",
        install: "apt-get install mariadb-backup",
        source: Source::Apt("mariadb-backup"),
        steps: &[E2e],
    },
    Prerequisite {
        name: "redis-server",
        program: "redis-server",
        probe: None,
        used_by: "the database e2e (a pod's own Redis)",
        install: "apt-get install redis-server (then `service redis-server stop`: omnidev runs its own)",
        source: Source::Apt("redis-server"),
        steps: &[E2e],
    },
    Prerequisite {
        name: "openssh-server",
        program: "sshd",
        probe: None,
        used_by: "the `up --host` e2e (a real sshd in a network namespace)",
        install: "apt-get install openssh-server (its own sshd is not used: the case runs one)",
        source: Source::Apt("openssh-server"),
        steps: &[E2e],
    },
    Prerequisite {
        name: "chromium",
        program: "chromium",
        probe: None,
        used_by: "the dashboard e2e (a real browser)",
        install: "apt-get install chromium",
        source: Source::Apt("chromium"),
        steps: &[E2e],
    },
    Prerequisite {
        name: "chromedriver",
        program: "chromedriver",
        probe: None,
        used_by: "the dashboard e2e (driving the browser)",
        install: "apt-get install chromium-driver",
        source: Source::Apt("chromium-driver"),
        steps: &[E2e],
    },
    Prerequisite {
        name: "node",
        program: "node",
        probe: None,
        used_by: "the example's vite (Node >= 20)",
        install: "apt-get install nodejs npm, or https://nodejs.org",
        source: Source::Manual,
        steps: &[E2e, Demo],
    },
    Prerequisite {
        name: "npm",
        program: "npm",
        probe: None,
        used_by: "installing pnpm",
        install: "apt-get install npm",
        source: Source::Manual,
        steps: &[E2e],
    },
    Prerequisite {
        name: "pnpm",
        program: "pnpm",
        probe: None,
        used_by: "the example's web workspace",
        install: "npm install -g <the packageManager of examples/omnigent-example/package.json>",
        source: Source::Pnpm,
        steps: &[E2e, Demo],
    },
];

/// The prerequisites of `steps` missing from `path` (a `PATH` value).
pub fn missing(path: &OsStr, steps: &[Step]) -> Vec<&'static Prerequisite> {
    PREREQUISITES
        .iter()
        .filter(|tool| tool.steps.iter().any(|step| steps.contains(step)))
        .filter(|tool| !usable(tool, path))
        .collect()
}

fn usable(tool: &Prerequisite, path: &OsStr) -> bool {
    let Some(found) = find_program(tool.program, path) else {
        return false;
    };
    let Some(args) = tool.probe else {
        return true;
    };
    Command::new(found)
        .args(args)
        .env("PATH", path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// The first executable file called `program` in the directories of `path`.
pub fn find_program(program: &str, path: &OsStr) -> Option<PathBuf> {
    std::env::split_paths(path)
        .map(|dir| dir.join(program))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}

/// The report for `missing`: one line per program with what needs it and
/// how to install it.
pub fn report(missing: &[&Prerequisite]) -> String {
    let width = missing.iter().map(|tool| tool.name.len()).max().unwrap_or(0);
    let mut text = format!(
        "{} missing on PATH (nothing was built):\n",
        if missing.len() == 1 {
            "1 prerequisite is".to_string()
        } else {
            format!("{} prerequisites are", missing.len())
        }
    );
    for tool in missing {
        let _ = writeln!(
            text,
            "  {:width$}  needed by {}; install: {}",
            tool.name, tool.used_by, tool.install
        );
    }
    text.push_str(
        "`cargo xtask ci --install-only` installs the ones this machine can and names the \
         commands for the rest.",
    );
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_path_misses_everything_and_e2e_tools_only_with_e2e() {
        let empty = OsStr::new("");
        assert_eq!(missing(empty, &[Lint, Test, E2e]).len(), PREREQUISITES.len());
        let without_e2e = missing(empty, &[Lint, Test]);
        assert!(
            without_e2e.iter().all(|tool| tool.steps.contains(&Lint) || tool.steps.contains(&Test))
        );
        assert!(!without_e2e.iter().any(|tool| tool.name == "tmux"));
        let e2e = missing(empty, &[E2e]);
        assert!(e2e.iter().any(|tool| tool.name == "uv"));
        assert!(!e2e.iter().any(|tool| tool.name == "rustfmt"));
    }

    #[test]
    fn a_non_executable_file_is_not_a_program() {
        let dir = std::env::temp_dir().join(format!("xtask-prereqs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        std::fs::write(dir.join("zsh"), "").expect("write");
        assert_eq!(find_program("zsh", dir.as_os_str()), None);
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }

    #[test]
    fn the_report_names_each_tool_and_its_install() {
        let text = report(&missing(OsStr::new(""), &[Lint, Test, E2e]));
        for tool in PREREQUISITES {
            assert!(text.contains(tool.name), "{text}");
            assert!(text.contains(tool.install), "{text}");
        }
    }
}
