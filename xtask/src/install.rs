//! Installing what a fresh machine lacks, for `cargo xtask ci` and `demo`:
//! rustup components, Debian packages (as root or with passwordless sudo),
//! uv with `pip install --user`, and the pnpm the bundled example pins with
//! npm. Each step is said before it runs; what cannot be installed here (no
//! root, no apt-get, no rustup) stops the task with the exact command to run.
//!
//! The decision is [`plan`], a pure function of what is missing and what the
//! machine offers ([`Machine`]), so that every case is tested without root.

use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Result, bail};

use crate::prereqs::{self, Prerequisite, Source, Step};
use crate::util;

/// What the machine offers for installing.
#[derive(Debug, Clone, Default)]
pub struct Machine {
    /// Who may install packages.
    pub privilege: Privilege,
    /// `apt-get` is on `PATH`.
    pub apt: bool,
    /// `rustup` is on `PATH`.
    pub rustup: bool,
    /// `python3 -m pip` works.
    pub pip: bool,
    /// Python's user base (`python3 -m site --user-base`): `pip install
    /// --user` puts scripts in its `bin/`.
    pub user_base: PathBuf,
    /// npm's global prefix, and whether this user may write there.
    pub npm_prefix: Option<(PathBuf, bool)>,
    /// The `pnpm@X.Y.Z` the bundled example pins.
    pub pnpm: String,
}

/// Who this process is, for apt-get.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Privilege {
    /// Root: runs apt-get itself.
    Root,
    /// Passwordless sudo (`sudo -n true` works).
    Sudo,
    /// Neither: apt-get is a command for the user.
    #[default]
    User,
}

impl Machine {
    fn user_bin(&self) -> PathBuf {
        self.user_base.join("bin")
    }
}

/// One thing to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Run a command (and, when it fails, `retry` instead once).
    Run {
        /// What it installs, for the user.
        says: String,
        /// The command.
        argv: Vec<String>,
        /// A second form to try when the first fails.
        retry: Option<Vec<String>>,
        /// Where the installed programs land, put in front of `PATH`.
        bin_dir: Option<PathBuf>,
    },
    /// A program is already installed in `dir`, only not on `PATH`.
    UseDir {
        /// The program.
        program: &'static str,
        /// Its directory.
        dir: PathBuf,
    },
}

/// What [`plan`] decided.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Done in order.
    pub actions: Vec<Action>,
    /// Commands the user must run, this machine cannot.
    pub by_hand: Vec<String>,
}

fn argv(words: &[&str]) -> Vec<String> {
    words.iter().map(ToString::to_string).collect()
}

/// How to install `missing` on `machine`.
pub fn plan(missing: &[&Prerequisite], machine: &Machine) -> Plan {
    let names = |pick: fn(Source) -> Option<&'static str>| -> Vec<&'static str> {
        missing.iter().filter_map(|tool| pick(tool.source)).collect()
    };
    let wants = |source: Source| missing.iter().any(|tool| tool.source == source);
    let mut plan = Plan::default();
    plan.rustup(
        &names(|source| match source {
            Source::Rustup(name) => Some(name),
            _ => None,
        }),
        machine,
    );
    let mut packages = names(|source| match source {
        Source::Apt(name) => Some(name),
        _ => None,
    });
    let uv = wants(Source::Uv) && !machine.user_bin().join("uv").is_file();
    // uv comes from pip; a Debian python3 may lack pip.
    if uv && !machine.pip {
        packages.push("python3-pip");
    }
    let pip_coming = plan.apt(&packages, machine) || machine.pip;
    if wants(Source::Uv) {
        plan.uv(machine, pip_coming);
    }
    if wants(Source::Pnpm) {
        plan.pnpm(machine);
    }
    plan
}

/// A command to run that installs `says`.
fn install(says: impl Into<String>, command: Vec<String>, bin_dir: Option<PathBuf>) -> Action {
    Action::Run { says: says.into(), argv: command, retry: None, bin_dir }
}

impl Plan {
    fn rustup(&mut self, components: &[&str], machine: &Machine) {
        if components.is_empty() {
            return;
        }
        let mut command = argv(&["rustup", "component", "add"]);
        command.extend(argv(components));
        if machine.rustup {
            self.actions.push(install(components.join(", "), command, None));
        } else {
            self.by_hand.push(format!(
                "{}  (rustup: https://rustup.rs; or this system's {} packages)",
                command.join(" "),
                components.join(" and ")
            ));
        }
    }

    /// The apt-get steps for `packages`; whether they will run here.
    fn apt(&mut self, packages: &[&str], machine: &Machine) -> bool {
        if packages.is_empty() {
            return false;
        }
        let sudo: &[&str] = match machine.privilege {
            Privilege::Root => &[],
            Privilege::Sudo => &["sudo", "-n"],
            Privilege::User => {
                self.by_hand.push(format!(
                    "sudo apt-get install -y {}  (installing packages needs root; \
                     this is neither root nor passwordless sudo)",
                    packages.join(" ")
                ));
                return false;
            }
        };
        if !machine.apt {
            self.by_hand.push(format!(
                "install {} with this system's package manager (there is no apt-get here)",
                packages.join(" ")
            ));
            return false;
        }
        let update = [sudo, &["apt-get", "update", "-qq"]].concat();
        self.actions.push(install("the package lists", argv(&update), None));
        let command = [
            sudo,
            &[
                "env",
                "DEBIAN_FRONTEND=noninteractive",
                "apt-get",
                "install",
                "-y",
                "-qq",
                "--no-install-recommends",
            ],
            packages,
        ]
        .concat();
        self.actions.push(install(packages.join(", "), argv(&command), None));
        // Debian starts a packaged database server on install; omnidev's
        // tests run their own and never use it.
        for (package, service) in [
            ("postgresql", "postgresql"),
            ("mariadb-server", "mariadb"),
            ("redis-server", "redis-server"),
            ("openssh-server", "ssh"),
        ] {
            if packages.contains(&package) {
                let script = format!("service {service} stop || true");
                let stop = [sudo, &["sh", "-c", script.as_str()]].concat();
                self.actions.push(install(
                    format!("Debian's own {service} stopped"),
                    argv(&stop),
                    None,
                ));
            }
        }
        true
    }

    fn uv(&mut self, machine: &Machine, pip: bool) {
        let bin = machine.user_bin();
        if bin.join("uv").is_file() {
            self.actions.push(Action::UseDir { program: "uv", dir: bin });
            return;
        }
        if !pip {
            self.by_hand.push(prereqs::UV_INSTALL.to_string());
            return;
        }
        let plain = argv(&["python3", "-m", "pip", "install", "--user", "--quiet", "uv"]);
        // PEP 668 ("externally managed") systems refuse a user install
        // without this flag; harmless for uv, a self-contained binary
        // without Python dependencies.
        let mut forced = plain.clone();
        forced.insert(5, "--break-system-packages".into());
        self.actions.push(Action::Run {
            says: "uv".into(),
            argv: plain,
            retry: Some(forced),
            bin_dir: Some(bin),
        });
    }

    fn pnpm(&mut self, machine: &Machine) {
        let pin = machine.pnpm.as_str();
        let Some((prefix, writable)) = &machine.npm_prefix else {
            self.by_hand
                .push(format!("npm install -g {pin}  (after installing npm: apt-get install npm)"));
            return;
        };
        // npm's global prefix when this user may write there; otherwise
        // the user's own, beside pip's scripts.
        let mut command = argv(&["npm", "install", "-g"]);
        let bin = if *writable {
            prefix.join("bin")
        } else {
            command.push("--prefix".into());
            command.push(machine.user_base.display().to_string());
            machine.user_bin()
        };
        if bin.join("pnpm").is_file() {
            self.actions.push(Action::UseDir { program: "pnpm", dir: bin });
            return;
        }
        command.extend(argv(&["--no-fund", "--no-audit", "--no-update-notifier", pin]));
        self.actions.push(install(pin, command, Some(bin)));
    }
}

impl Machine {
    /// Look at this machine, asking only what `missing` needs to know.
    pub fn probe(missing: &[&Prerequisite]) -> Result<Self> {
        let path = std::env::var_os("PATH").unwrap_or_default();
        let on_path = |program| prereqs::find_program(program, &path).is_some();
        let root = nix::unistd::geteuid().is_root();
        let wants = |source: Source| missing.iter().any(|tool| tool.source == source);
        let privilege = if root {
            Privilege::Root
        } else if on_path("sudo") && succeeds(Command::new("sudo").args(["-n", "true"])) {
            Privilege::Sudo
        } else {
            Privilege::User
        };
        let mut machine = Self {
            privilege,
            apt: on_path("apt-get"),
            rustup: on_path("rustup"),
            ..Self::default()
        };
        machine.user_base = read(Command::new("python3").args(["-m", "site", "--user-base"]))
            .map_or_else(|| home().join(".local"), |base| PathBuf::from(base.trim()));
        if wants(Source::Uv) {
            machine.pip = succeeds(Command::new("python3").args(["-m", "pip", "--version"]));
        }
        if wants(Source::Pnpm) {
            machine.pnpm = util::example_package_manager()?;
            machine.npm_prefix =
                read(Command::new("npm").args(["config", "get", "prefix"])).map(|prefix| {
                    let prefix = PathBuf::from(prefix.trim());
                    let writable = root || writable(&prefix.join("lib/node_modules"));
                    (prefix, writable)
                });
        }
        Ok(machine)
    }
}

fn home() -> PathBuf {
    std::env::var_os("HOME").map_or_else(|| PathBuf::from("/"), PathBuf::from)
}

/// A directory (or, when it does not exist yet, its parent) this user may write.
fn writable(dir: &Path) -> bool {
    let existing = dir.ancestors().find(|dir| dir.exists()).unwrap_or(Path::new("/"));
    nix::unistd::access(existing, nix::unistd::AccessFlags::W_OK).is_ok()
}

fn quiet(command: &mut Command) -> &mut Command {
    command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::null())
}

fn succeeds(command: &mut Command) -> bool {
    quiet(command).status().is_ok_and(|status| status.success())
}

fn read(command: &mut Command) -> Option<String> {
    quiet(command)
        .output()
        .ok()
        .filter(|output| output.status.success())
        .map(|output| String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Install whatever `steps` need and `PATH` lacks, saying each step as
/// `who: …`; `PATH` of this process then holds the directories the installs
/// landed in. Fails naming the commands to run by hand when something could
/// not be installed here. With `dry_run`, only says what it would do.
pub fn ensure(who: &str, steps: &[Step], dry_run: bool) -> Result<()> {
    let missing = prereqs::missing(&path(), steps);
    if missing.is_empty() {
        return Ok(());
    }
    let names: Vec<&str> = missing.iter().map(|tool| tool.name).collect();
    println!("{who}: missing on PATH: {}", names.join(", "));
    let plan = plan(&missing, &Machine::probe(&missing)?);
    let mut added = Vec::new();
    for action in &plan.actions {
        match action {
            Action::UseDir { program, dir } => {
                println!("{who}: {program} is installed in {}; using it", dir.display());
                added.push(dir.clone());
            }
            Action::Run { says, argv, retry, bin_dir } => {
                println!("{who}: installing {says}: {}", argv.join(" "));
                if dry_run {
                    continue;
                }
                if !run(argv) {
                    let Some(retry) = retry else {
                        bail!("`{}` failed; run it yourself, then this again", argv.join(" "));
                    };
                    println!("{who}: that failed; retrying: {}", retry.join(" "));
                    if !run(retry) {
                        bail!(
                            "`{}` failed; install {says} yourself: {}",
                            retry.join(" "),
                            prereqs::UV_INSTALL
                        );
                    }
                }
                added.extend(bin_dir.clone());
            }
        }
    }
    if dry_run {
        for command in &plan.by_hand {
            println!("{who}: would stop: run by hand: {command}");
        }
        return Ok(());
    }
    let user_path = path();
    for dir in &added {
        prepend_path(dir);
    }
    let still = prereqs::missing(&path(), steps);
    if !plan.by_hand.is_empty() || !still.is_empty() {
        let mut text = String::new();
        if !plan.by_hand.is_empty() {
            text.push_str("this machine cannot install everything itself; run:\n");
            for command in &plan.by_hand {
                let _ = writeln!(text, "  {command}");
            }
        }
        if !still.is_empty() {
            text.push_str(&prereqs::report(&still));
        }
        bail!("{}", text.trim_end());
    }
    for dir in added {
        if !std::env::split_paths(&user_path).any(|entry| entry == dir) {
            println!(
                "{who}: {} is not on your PATH; to use what was installed there outside xtask: \
                 export PATH=\"{}:$PATH\"",
                dir.display(),
                dir.display()
            );
        }
    }
    println!("{who}: installed: {}", names.join(", "));
    Ok(())
}

/// Installs the Debian `packages` with apt-get, as root or with
/// passwordless sudo, saying each step as `who: …`; fails naming the
/// command to run when this machine cannot (no root, no apt-get). With
/// `dry_run`, only says what it would do.
pub fn apt_packages(who: &str, packages: &[&str], dry_run: bool) -> Result<()> {
    let machine = Machine::probe(&[])?;
    let mut plan = Plan::default();
    plan.apt(packages, &machine);
    if let Some(command) = plan.by_hand.first() {
        bail!("{who}: cannot install {} here; run: {command}", packages.join(", "));
    }
    for action in &plan.actions {
        if let Action::Run { says, argv, .. } = action {
            println!("{who}: installing {says}: {}", argv.join(" "));
            if !dry_run && !run(argv) {
                bail!("`{}` failed; run it yourself, then this again", argv.join(" "));
            }
        }
    }
    Ok(())
}

fn path() -> OsString {
    std::env::var_os("PATH").unwrap_or_default()
}

fn run(argv: &[String]) -> bool {
    Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// Put `dir` in front of this process' `PATH` (inherited by every step
/// after it) unless it is there already.
fn prepend_path(dir: &Path) {
    let current = path();
    if std::env::split_paths(&current).any(|entry| entry == dir) {
        return;
    }
    let mut dirs = vec![dir.to_path_buf()];
    dirs.extend(std::env::split_paths(&current));
    let joined = std::env::join_paths(dirs).expect("PATH entries never hold ':'");
    // SAFETY: the tasks that install call this on the main thread before
    // they start any thread, so no other thread reads the environment.
    unsafe { std::env::set_var("PATH", joined) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prereqs::PREREQUISITES;

    fn tools(names: &[&str]) -> Vec<&'static Prerequisite> {
        names
            .iter()
            .map(|name| {
                PREREQUISITES.iter().find(|tool| tool.name == *name).expect("a prerequisite")
            })
            .collect()
    }

    fn fresh_debian(root: bool) -> Machine {
        Machine {
            privilege: if root { Privilege::Root } else { Privilege::User },
            apt: true,
            rustup: true,
            pip: true,
            user_base: PathBuf::from("/nonexistent/home/.local"),
            npm_prefix: Some((PathBuf::from("/nonexistent/usr"), root)),
            pnpm: "pnpm@10.0.0".into(),
        }
    }

    fn commands(plan: &Plan) -> Vec<String> {
        plan.actions
            .iter()
            .map(|action| match action {
                Action::Run { argv, .. } => argv.join(" "),
                Action::UseDir { program, dir } => format!("use {program} in {}", dir.display()),
            })
            .collect()
    }

    #[test]
    fn as_root_everything_is_installed_in_order() {
        let missing = tools(&["clippy", "uv", "zsh", "fish", "pnpm"]);
        let plan = plan(&missing, &fresh_debian(true));
        assert_eq!(plan.by_hand, Vec::<String>::new());
        assert_eq!(
            commands(&plan),
            [
                "rustup component add clippy",
                "apt-get update -qq",
                "env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends zsh fish",
                "python3 -m pip install --user --quiet uv",
                "npm install -g --no-fund --no-audit --no-update-notifier pnpm@10.0.0",
            ]
        );
        let Action::Run { retry, bin_dir, .. } = &plan.actions[3] else {
            panic!("uv is run");
        };
        assert_eq!(
            retry.as_ref().map(|argv| argv.join(" ")).as_deref(),
            Some("python3 -m pip install --user --break-system-packages --quiet uv")
        );
        assert_eq!(bin_dir.as_deref(), Some(Path::new("/nonexistent/home/.local/bin")));
    }

    #[test]
    fn without_root_apt_is_a_command_to_run_and_the_rest_lands_in_the_user_base() {
        let missing = tools(&["uv", "zsh", "fish", "pnpm"]);
        let plan = plan(&missing, &fresh_debian(false));
        assert_eq!(plan.by_hand.len(), 1, "{plan:?}");
        assert!(plan.by_hand[0].starts_with("sudo apt-get install -y zsh fish "), "{plan:?}");
        assert_eq!(
            commands(&plan),
            [
                "python3 -m pip install --user --quiet uv",
                "npm install -g --prefix /nonexistent/home/.local --no-fund --no-audit --no-update-notifier pnpm@10.0.0",
            ]
        );
        let with_sudo = Machine { privilege: Privilege::Sudo, ..fresh_debian(false) };
        let plan = super::plan(&tools(&["zsh"]), &with_sudo);
        assert!(plan.by_hand.is_empty());
        assert_eq!(
            commands(&plan),
            [
                "sudo -n apt-get update -qq",
                "sudo -n env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends zsh"
            ]
        );
    }

    #[test]
    fn no_apt_no_rustup_no_pip_names_the_commands() {
        let machine = Machine { apt: false, rustup: false, pip: false, ..fresh_debian(true) };
        let plan = plan(&tools(&["rustfmt", "uv", "tmux"]), &machine);
        assert!(plan.actions.is_empty(), "{plan:?}");
        assert_eq!(plan.by_hand.len(), 3, "{plan:?}");
        assert!(plan.by_hand[0].starts_with("rustup component add rustfmt"));
        assert!(
            plan.by_hand[1].contains("tmux python3-pip") && plan.by_hand[1].contains("no apt-get"),
            "{plan:?}"
        );
        assert_eq!(plan.by_hand[2], prereqs::UV_INSTALL);
    }

    #[test]
    fn pip_missing_is_installed_with_apt_before_uv() {
        let machine = Machine { pip: false, ..fresh_debian(true) };
        let plan = plan(&tools(&["uv"]), &machine);
        assert_eq!(
            commands(&plan),
            [
                "apt-get update -qq",
                "env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-pip",
                "python3 -m pip install --user --quiet uv",
            ]
        );
    }

    #[test]
    fn a_program_installed_off_path_is_used_not_installed_again() {
        let base = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir_all(base.path().join("bin")).expect("bin");
        std::fs::write(base.path().join("bin/uv"), "").expect("uv");
        let machine = Machine { user_base: base.path().to_path_buf(), ..fresh_debian(true) };
        let plan = plan(&tools(&["uv"]), &machine);
        assert_eq!(plan.actions, [Action::UseDir { program: "uv", dir: base.path().join("bin") }]);
    }
}
