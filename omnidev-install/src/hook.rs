//! The shell snippets printed by `omnidev shell-hook`.

/// Set to a non-empty value to turn the update check off.
pub const NO_UPDATE_CHECK_ENV: &str = "OMNIDEV_NO_UPDATE_CHECK";

/// A shell `shell-hook` can print a snippet for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shell {
    /// GNU bash (`~/.bashrc`).
    Bash,
    /// zsh (`~/.zshrc`).
    Zsh,
    /// fish (`~/.config/fish/config.fish`).
    Fish,
}

impl Shell {
    /// The shell named by a `$SHELL` value such as `/usr/bin/zsh`.
    pub fn from_path(shell: &str) -> Option<Self> {
        match shell.rsplit('/').next()? {
            "bash" => Some(Self::Bash),
            "zsh" => Some(Self::Zsh),
            "fish" => Some(Self::Fish),
            _ => None,
        }
    }

    /// The snippet to append to the shell's rc file. It runs
    /// `omnidev check --quiet` only in an interactive shell where `omnidev`
    /// is on PATH and `OMNIDEV_NO_UPDATE_CHECK` is empty, and never fails
    /// the shell.
    pub fn snippet(self) -> &'static str {
        match self {
            Self::Bash => BASH,
            Self::Zsh => ZSH,
            Self::Fish => FISH,
        }
    }
}

const BASH: &str = r#"# omnidev: daily update check for omnigent (add to ~/.bashrc)
if [[ $- == *i* ]] && [[ -z "${OMNIDEV_NO_UPDATE_CHECK:-}" ]] && command -v omnidev >/dev/null 2>&1; then
    omnidev check --quiet || true
fi
"#;

const ZSH: &str = r#"# omnidev: daily update check for omnigent (add to ~/.zshrc)
if [[ -o interactive ]] && [[ -z "${OMNIDEV_NO_UPDATE_CHECK:-}" ]] && (( ${+commands[omnidev]} )); then
    omnidev check --quiet || true
fi
"#;

const FISH: &str = r#"# omnidev: daily update check for omnigent (add to ~/.config/fish/config.fish)
if status is-interactive; and test -z "$OMNIDEV_NO_UPDATE_CHECK"; and command -q omnidev
    omnidev check --quiet; or true
end
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_from_path() {
        assert_eq!(Shell::from_path("/usr/bin/zsh"), Some(Shell::Zsh));
        assert_eq!(Shell::from_path("bash"), Some(Shell::Bash));
        assert_eq!(Shell::from_path("/bin/tcsh"), None);
    }

    #[test]
    fn snippets() {
        insta::assert_snapshot!("bash", Shell::Bash.snippet());
        insta::assert_snapshot!("zsh", Shell::Zsh.snippet());
        insta::assert_snapshot!("fish", Shell::Fish.snippet());
    }
}
