//! The help `omnidev` prints: the subcommands in groups, the long help of
//! `up`, `attach` and `completions`, and help fitted to the checkout's
//! profile (its own ports and services named, Omnigent-only flags
//! marked or hidden).

use std::path::PathBuf;

/// How `omnidev --help` groups the subcommands: a heading, then the
/// subcommands under it. Every visible subcommand is in exactly one group
/// (a unit test checks it).
pub const GROUPS: &[(&str, &[&str])] = &[
    (
        "Pod commands (the pod of this checkout)",
        &[
            "up",
            "attach",
            "status",
            "ls",
            "dashboard",
            "logs",
            "events",
            "wait",
            "restart",
            "reload-profile",
            "stop",
            "start",
            "run",
            "db",
            "omnigent",
            "clean",
            "gc",
            "init",
            "profile",
            "mcp",
        ],
    ),
    (
        "Install commands (Omnigent through uv; no checkout needed)",
        &["install", "update", "check", "shell-hook"],
    ),
    ("Other", &["completions", "help"]),
];

/// The long help of `omnidev up` after its options.
pub(super) const UP_LONG_HELP: &str = "\
Overview:
  Finds the checkout, its profile (omnidev.toml, else the embedded Omnigent
  profile) and its pod directory, takes the pod's lock, allocates ports, then
  starts the services in dependency order, each once its dependencies are
  ready, and restarts, reloads and stops them. A terminal gets the TUI;
  otherwise (or with --headless) each line prints as `<service> | <line>`.

TUI keys:
  1…9 / 0 / Tab, Shift-Tab   focus a service pane / the combined pane / cycle
  ↑ ↓ j k  PgUp PgDn Space   scroll (scrolling up stops following)
  u d  g G Home End          half page, top, bottom (G follows again)
  f / F                      toggle follow
  / or ? then text, Enter    search forward / backward; n / N next / previous
  Esc                        clear the search highlight
  w                          wrap long lines
  t                          show each line's time (toggle; --timestamps starts with it on)
  r                          restart the focused service (dependents follow)
  s                          stop the focused service (the pod runs on); s again starts it
  R                          reload the watched services (every one when none has watch rules)
  P                          apply the changed profile file (omnidev reload-profile)
  c                          clear the focused pane
  q, Ctrl-C                  quit and stop everything
  Ctrl-Z                     suspend (the pod runs on); fg brings the UI back

Exit codes:
  0      stopped by a signal, q or Ctrl-C, or every service ended with 0
         by itself (after `omnidev stop SERVICE` the pod waits to be stopped)
  1      an error before start, or a service ended with a failure and no restart
  2      usage error
  128+N  a third signal N during shutdown (the orphan guard kills the rest)
";

/// The examples closing `omnidev up --help` for Omnigent's profile (and
/// outside a checkout).
pub(super) const UP_EXAMPLES: &str = "
Examples:
  omnidev                                          TUI for the surrounding checkout
  omnidev --headless --no-vite                     CI / agents: Omnigent's backend only, plain lines
  omnidev up --detach && omnidev status            background pod, then its state
  omnidev --vite-host 0.0.0.0 --trust-lan-origins  reach Omnigent's vite from the LAN
  omnidev --repo ~/src/other --port server=7000    another checkout, a fixed port
";

/// `omnidev up`'s long help for `profile`: Omnigent's examples when it
/// runs vite, else examples naming its own first service and port.
pub(super) fn up_long_help(profile: &omnidev_pod::Profile) -> String {
    use std::fmt::Write as _;
    if profile.services.contains_key("vite") {
        return format!("{UP_LONG_HELP}{UP_EXAMPLES}");
    }
    let service = profile.services.keys().next().map_or("web", String::as_str);
    let port = profile.ports.keys().next().map_or("web", String::as_str);
    let rows = [
        ("omnidev".to_owned(), "TUI for the surrounding checkout"),
        ("omnidev --headless".to_owned(), "CI / agents: plain `<service> | <line>` lines"),
        ("omnidev up --detach && omnidev status".to_owned(), "background pod, then its state"),
        (format!("omnidev --only {service}"), "one service and what it depends on"),
        (
            format!("omnidev --repo ~/src/other --port {port}=7000"),
            "another checkout, a fixed port",
        ),
    ];
    let width = rows.iter().map(|(command, _)| command.len()).max().unwrap_or(0);
    let mut help = format!("{UP_LONG_HELP}\nExamples:\n");
    for (command, what) in rows {
        let _ = writeln!(help, "  {command:width$}  {what}");
    }
    help
}

/// The long help of `omnidev attach` after its options.
pub(super) const ATTACH_LONG_HELP: &str = "\
Overview:
  The TUI of a pod that runs without one (`omnidev up --detach`, or an
  `omnidev up` in another terminal), over its control socket: the panes
  start with the pod's kept lines and events, then follow; the keys act on
  the pod. Several can be attached at once.

Keys: those of `omnidev up` (see `omnidev up --help`), except:
  q, Ctrl-C                  detach: the UI leaves, the pod keeps running
  c                          clear the pane in this UI only
  r, R, s                    sent to the pod; the footer says how it went
Stop the pod with `omnidev stop`.

Exit codes:
  0      detached (q, Ctrl-C, SIGINT, SIGTERM, SIGHUP), or the pod stopped
         while attached (the last line says how)
  1      not on a terminal, or the pod's control socket does not answer
  2      a --pod-dir that is not a pod
  3      no pod runs there
";

/// The long help of `omnidev completions` after its arguments.
pub(super) const COMPLETIONS_LONG_HELP: &str = "\
Where the script goes (then open a new shell):
  bash        omnidev completions --install bash
              (writes ~/.local/share/bash-completion/completions/omnidev)
  zsh         omnidev completions --install zsh
              (writes ~/.local/share/zsh/site-functions/_omnidev; with
              `fpath=(~/.local/share/zsh/site-functions $fpath)` before
              compinit in ~/.zshrc, which it names when missing)
  fish        omnidev completions --install fish
              (writes ~/.config/fish/completions/omnidev.fish)
  elvish      omnidev completions elvish >> ~/.config/elvish/rc.elv
  powershell  omnidev completions powershell >> $PROFILE
--install follows XDG_DATA_HOME, XDG_CONFIG_HOME and BASH_COMPLETION_USER_DIR,
rewrites only a file it wrote itself (--force replaces another), and says
where it wrote.
";

/// Whether `args` ask for help (`-h`, `--help`, `help`) before a `--`.
pub(super) fn asks_for_help(args: &[std::ffi::OsString]) -> bool {
    args.iter()
        .skip(1)
        .take_while(|arg| *arg != "--")
        .any(|arg| arg == "-h" || arg == "--help" || arg == "help")
}

/// The profile help is shown for: `--profile FILE`, else that of the
/// checkout (`--repo DIR`, else the surrounding one). `None` when there is
/// none to be had: help is then the general one, never an error.
pub(super) fn profile_for_help(args: &[std::ffi::OsString]) -> Option<omnidev_pod::Profile> {
    let value = |flag: &str| {
        let prefix = format!("{flag}=");
        args.iter().enumerate().find_map(|(i, arg)| {
            let arg = arg.to_str()?;
            if arg == flag {
                args.get(i + 1).map(PathBuf::from)
            } else {
                arg.strip_prefix(&prefix).map(PathBuf::from)
            }
        })
    };
    if let Some(file) = value("--profile") {
        return omnidev_pod::Profile::from_file(&file).ok();
    }
    let cwd = std::env::current_dir().ok()?;
    let repo = omnidev_pod::resolve_repo_root(&cwd, value("--repo").as_deref()).ok()?;
    omnidev_pod::Profile::load(&repo, None).ok().map(|(profile, _)| profile)
}

/// `restart`'s help naming what it restarts without an argument in
/// `profile`.
pub(super) fn restart_for_profile(
    command: clap::Command,
    profile: &omnidev_pod::Profile,
) -> clap::Command {
    let mut watched: Vec<&str> = profile
        .services
        .iter()
        .filter(|(_, service)| !service.watch.is_empty())
        .map(|(name, _)| name.as_str())
        .collect();
    if watched.is_empty() {
        watched = profile.services.keys().map(String::as_str).collect();
    }
    let names = watched.join(", ");
    command.mut_arg("service", |arg| {
        let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
        arg.help(format!("{help} (this profile: {names})"))
    })
}

/// The options of `up` as they apply to `profile`: the Omnigent-only ones
/// (marked "Omnigent profile:" in every help) are hidden when the profile
/// has nothing they act on, and `--port`, `--host`, `--only` and `--skip`
/// name the profile's own ports and services.
pub fn fit_to_profile(command: clap::Command, profile: &omnidev_pod::Profile) -> clap::Command {
    let has_port = |name: &str| profile.ports.contains_key(name);
    let applies = [
        ("server_port", has_port("server")),
        ("vite_port", has_port("vite")),
        ("vite_host", has_port("vite")),
        ("no_vite", profile.services.contains_key("vite")),
        ("trust_lan_origins", profile.lan_origins.is_some()),
    ];
    let mut command = command;
    for (id, applies) in applies {
        if !applies {
            command = command.mut_arg(id, |arg| arg.hide(true));
        }
    }
    let list = |names: Vec<&String>| omnidev_pod::names::listed(names);
    let ports = list(profile.ports.keys().collect());
    let services = list(profile.services.keys().collect());
    let with = |what: &'static str, names: String| {
        move |arg: clap::Arg| {
            let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
            arg.help(format!("{help} (this profile's {what}: {names})"))
        }
    };
    command
        .mut_arg("ports", with("ports", ports.clone()))
        .mut_arg("hosts", with("ports", ports))
        .mut_arg("only", with("services", services.clone()))
        .mut_arg("skip", with("services", services))
}
