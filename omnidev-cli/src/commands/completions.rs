//! `omnidev completions SHELL`: print a shell completion script, or with
//! `--install` write it where that shell looks for it (bash-completion's
//! and fish's XDG directories; zsh's `$XDG_DATA_HOME/zsh/site-functions`,
//! which needs a line in `.zshrc`, said when it is missing) and say where.
//! A file there that omnidev did not write is replaced only with `--force`.
//!
//! `omnidev man DIR` (hidden; `cargo xtask dist` ships its output) writes
//! the man pages generated from the same clap definitions.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap_complete::Shell;

use crate::cli::{CompletionsArgs, ManArgs};
use crate::error::Error;

/// The line that marks a completion file as omnidev's (second line for zsh,
/// whose first must be `#compdef`).
pub const MARK: &str = "# Written by `omnidev completions --install`, which rewrites this file.";

/// Runs `omnidev completions`.
pub fn run(args: &CompletionsArgs) -> miette::Result<ExitCode> {
    if !args.install {
        crate::output::write_stdout(&script(args.shell))?;
        return Ok(ExitCode::SUCCESS);
    }
    let env = Dirs::from_env(|name| std::env::var_os(name));
    let place = place(args.shell, &env)?;
    let said = install(&place.file, &marked(args.shell), args.force)?;
    let mut text = format!("{said} {}\n", place.file.display());
    if let Some(hint) = place.hint(&env) {
        text.push_str(&hint);
        text.push('\n');
    }
    crate::output::write_stdout(&text)?;
    Ok(ExitCode::SUCCESS)
}

/// The completion script for `shell`.
fn script(shell: Shell) -> String {
    let mut command = crate::cli::command();
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut command, "omnidev", &mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// The script with [`MARK`] in it.
fn marked(shell: Shell) -> String {
    let script = script(shell);
    match script.split_once('\n') {
        Some((first, rest)) if first.starts_with("#compdef") => format!("{first}\n{MARK}\n{rest}"),
        _ => format!("{MARK}\n{script}"),
    }
}

/// Where scripts go, from the environment: `XDG_DATA_HOME` and
/// `XDG_CONFIG_HOME` (else their defaults under `HOME`), bash-completion's
/// own directory, zsh's `ZDOTDIR`; relative values are ignored, as the XDG
/// spec says.
#[derive(Debug)]
pub struct Dirs {
    home: Option<PathBuf>,
    data: Option<PathBuf>,
    config: Option<PathBuf>,
    bash_user_dir: Option<PathBuf>,
    zdotdir: Option<PathBuf>,
}

impl Dirs {
    /// Read through `var` (`std::env::var_os` outside tests).
    pub fn from_env(var: impl Fn(&str) -> Option<OsString>) -> Self {
        use omnidev_core::fs::{xdg_dir, xdg_home};
        Self {
            home: xdg_dir(var("HOME")),
            data: xdg_home(var("XDG_DATA_HOME"), var("HOME"), ".local/share"),
            config: xdg_home(var("XDG_CONFIG_HOME"), var("HOME"), ".config"),
            bash_user_dir: xdg_dir(var("BASH_COMPLETION_USER_DIR")),
            zdotdir: xdg_dir(var("ZDOTDIR")),
        }
    }
}

/// Where a shell's script goes.
#[derive(Debug, PartialEq, Eq)]
pub struct Place {
    shell: Shell,
    /// The file.
    pub file: PathBuf,
}

/// The file `shell` loads omnidev's completions from.
pub fn place(shell: Shell, env: &Dirs) -> Result<Place, Error> {
    let data = || env.data.as_deref().ok_or(Error::NoHome);
    let config = || env.config.as_deref().ok_or(Error::NoHome);
    let file = match shell {
        // bash-completion 2 looks in $BASH_COMPLETION_USER_DIR/completions,
        // else $XDG_DATA_HOME/bash-completion/completions, by command name.
        Shell::Bash => match &env.bash_user_dir {
            Some(dir) => dir.join("completions/omnidev"),
            None => data()?.join("bash-completion/completions/omnidev"),
        },
        Shell::Fish => config()?.join("fish/completions/omnidev.fish"),
        // zsh has no per-user default: a directory of its functions that
        // `.zshrc` adds to fpath.
        Shell::Zsh => data()?.join("zsh/site-functions/_omnidev"),
        other => {
            return Err(Error::CompletionsShell { shell: other.to_string() });
        }
    };
    Ok(Place { shell, file })
}

impl Place {
    /// What the user still has to do for the shell to load the file.
    fn hint(&self, env: &Dirs) -> Option<String> {
        let dir = self.file.parent()?;
        match self.shell {
            Shell::Bash => Some(
                "bash loads it in new shells where bash-completion is installed \
                 (apt-get install bash-completion)"
                    .into(),
            ),
            Shell::Zsh => {
                let zshrc = env.zdotdir.as_deref().or(env.home.as_deref())?.join(".zshrc");
                let text = omnidev_core::fs::read_linked(&zshrc, 1 << 20)
                    .and_then(omnidev_core::fs::text)
                    .ok()
                    .flatten()
                    .unwrap_or_default();
                let home = env.home.as_deref().unwrap_or(Path::new("/"));
                let short = dir.strip_prefix(home).map(|rest| format!("~/{}", rest.display()));
                let mentioned = text.contains(&dir.display().to_string())
                    || short.as_ref().is_ok_and(|short| text.contains(short.as_str()));
                if mentioned {
                    Some("zsh loads it in new shells (its directory is in your .zshrc)".into())
                } else {
                    Some(format!(
                        "zsh loads it once {} has, before compinit:\n  fpath=({} $fpath)\n  \
                         autoload -Uz compinit && compinit",
                        zshrc.display(),
                        dir.display()
                    ))
                }
            }
            _ => Some("fish loads it in new shells".into()),
        }
    }
}

/// Write `script` to `file` (atomically, creating its directory) unless a
/// file there lacks [`MARK`] and `force` is off. Returns what was done, for
/// the message.
fn install(file: &Path, script: &str, force: bool) -> Result<&'static str, Error> {
    // Unreadable (not UTF-8, a directory, no permission) is not ours either.
    let read = omnidev_core::fs::read_linked(file, 1 << 20).and_then(omnidev_core::fs::text);
    let said = match read {
        Ok(Some(old)) if old == script => return Ok("up to date:"),
        Ok(Some(old)) if old.contains(MARK) => "updated",
        Ok(None) => "wrote",
        _ if force => "replaced (it was not omnidev's; --force)",
        _ => {
            return Err(Error::CompletionsForeign { path: file.to_path_buf() });
        }
    };
    let write = |path: &Path| -> std::io::Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        omnidev_core::fs::write_atomic(path, script.as_bytes())
    };
    write(file).map_err(Error::write(file))?;
    Ok(said)
}

/// Runs `omnidev man DIR`: one page per visible command (`omnidev.1`,
/// `omnidev-up.1`, `omnidev-profile-show.1`, …), each written atomically.
pub fn man(args: &ManArgs) -> miette::Result<ExitCode> {
    let mut pages = Vec::new();
    let mut command = crate::cli::command().disable_help_subcommand(true);
    command.build();
    collect(command, &mut pages).map_err(Error::write(&args.dir))?;
    std::fs::create_dir_all(&args.dir).map_err(Error::write(&args.dir))?;
    let mut text = String::new();
    for (name, page) in pages {
        let path = args.dir.join(name);
        omnidev_core::fs::write_atomic(&path, &page).map_err(Error::write(&path))?;
        text.push_str(&path.display().to_string());
        text.push('\n');
    }
    crate::output::write_stdout(&text)?;
    Ok(ExitCode::SUCCESS)
}

/// The page of `command` and of each visible subcommand, depth first.
fn collect(command: clap::Command, pages: &mut Vec<(String, Vec<u8>)>) -> std::io::Result<()> {
    for sub in command.get_subcommands().filter(|sub| !sub.is_hide_set()) {
        collect(sub.clone(), pages)?;
    }
    let man = clap_mangen::Man::new(command);
    let mut page = Vec::new();
    man.render(&mut page)?;
    pages.push((man.get_filename(), page));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dirs(vars: &[(&str, &str)]) -> Dirs {
        let vars: Vec<(String, String)> =
            vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        Dirs::from_env(|name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| OsString::from(v)))
    }

    #[test]
    fn each_shell_gets_its_xdg_place() {
        let home = dirs(&[("HOME", "/home/ada")]);
        let file = |shell, env: &Dirs| place(shell, env).map(|place| place.file);
        assert_eq!(
            file(Shell::Bash, &home).ok(),
            Some("/home/ada/.local/share/bash-completion/completions/omnidev".into())
        );
        assert_eq!(
            file(Shell::Fish, &home).ok(),
            Some("/home/ada/.config/fish/completions/omnidev.fish".into())
        );
        assert_eq!(
            file(Shell::Zsh, &home).ok(),
            Some("/home/ada/.local/share/zsh/site-functions/_omnidev".into())
        );
        let xdg = dirs(&[
            ("HOME", "/home/ada"),
            ("XDG_DATA_HOME", "/d"),
            ("XDG_CONFIG_HOME", "/c"),
            // Relative: ignored.
            ("BASH_COMPLETION_USER_DIR", "rel"),
        ]);
        assert_eq!(
            file(Shell::Bash, &xdg).ok(),
            Some("/d/bash-completion/completions/omnidev".into())
        );
        assert_eq!(file(Shell::Fish, &xdg).ok(), Some("/c/fish/completions/omnidev.fish".into()));
        let bash_dir = dirs(&[("HOME", "/h"), ("BASH_COMPLETION_USER_DIR", "/b")]);
        assert_eq!(file(Shell::Bash, &bash_dir).ok(), Some("/b/completions/omnidev".into()));
        assert!(matches!(place(Shell::Elvish, &home), Err(Error::CompletionsShell { .. })));
        assert!(matches!(place(Shell::Bash, &dirs(&[])), Err(Error::NoHome)));
    }

    #[test]
    fn the_mark_keeps_zsh_compdef_first() {
        let zsh = marked(Shell::Zsh);
        let mut lines = zsh.lines();
        assert!(lines.next().is_some_and(|l| l.starts_with("#compdef omnidev")));
        assert_eq!(lines.next(), Some(MARK));
        assert!(marked(Shell::Fish).starts_with(MARK));
    }

    #[test]
    fn a_foreign_file_is_kept_unless_forced_and_ours_is_rewritten() {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("a/b/omnidev");
        assert_eq!(install(&file, &format!("{MARK}\nv1\n"), false).ok(), Some("wrote"));
        assert_eq!(install(&file, &format!("{MARK}\nv1\n"), false).ok(), Some("up to date:"));
        assert_eq!(install(&file, &format!("{MARK}\nv2\n"), false).ok(), Some("updated"));
        std::fs::write(&file, "complete -F _mine omnidev\n").expect("write");
        assert!(matches!(
            install(&file, &format!("{MARK}\nv3\n"), false),
            Err(Error::CompletionsForeign { .. })
        ));
        assert_eq!(std::fs::read_to_string(&file).expect("read"), "complete -F _mine omnidev\n");
        assert!(
            install(&file, &format!("{MARK}\nv3\n"), true).is_ok_and(|s| s.starts_with("replaced"))
        );
        assert_eq!(std::fs::read_to_string(&file).expect("read"), format!("{MARK}\nv3\n"));
    }

    #[test]
    fn the_zsh_hint_names_the_fpath_line_until_zshrc_has_it() {
        let home = tempfile::tempdir().expect("temp dir");
        let env = dirs(&[("HOME", home.path().to_str().expect("a UTF-8 temp dir"))]);
        let place = place(Shell::Zsh, &env).expect("place");
        let hint = place.hint(&env).expect("hint");
        assert!(hint.contains("fpath=("), "{hint}");
        std::fs::write(
            home.path().join(".zshrc"),
            "fpath=(~/.local/share/zsh/site-functions $fpath)\n",
        )
        .expect("zshrc");
        let hint = place.hint(&env).expect("hint");
        assert!(!hint.contains("fpath=("), "{hint}");
    }
}
