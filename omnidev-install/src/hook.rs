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

// Each snippet first reads the stamp `CheckCache::save` keeps beside the
// cache (`crate::cache::quiet_stamp`): within a day of the last check with
// nothing on offer, `omnidev check --quiet` would say nothing and start
// nothing, so the shell starts nothing either (builtins only: read, printf
// or zsh/datetime, fish's `path mtime`). A missing, unreadable or odd
// stamp runs the check.

const BASH: &str = r#"# omnidev: daily update check for omnigent (add to ~/.bashrc)
if [[ $- == *i* ]] && [[ -z "${OMNIDEV_NO_UPDATE_CHECK:-}" ]] && command -v omnidev >/dev/null 2>&1; then
    # Checked less than a day ago with nothing to offer: start nothing.
    __omnidev_dir=${XDG_CACHE_HOME:-}; [[ $__omnidev_dir == /* ]] || __omnidev_dir=$HOME/.cache
    __omnidev_at= __omnidev_max= __omnidev_now=
    { read -r __omnidev_at __omnidev_max < "$__omnidev_dir/omnidev/omnigent-check.quiet"; } 2>/dev/null || true
    printf -v __omnidev_now '%(%s)T' -1 2>/dev/null || true
    if ! [[ $__omnidev_at =~ ^[0-9]+$ && $__omnidev_max =~ ^[0-9]+$ && $__omnidev_now =~ ^[0-9]+$ ]] \
        || (( __omnidev_now - __omnidev_at >= __omnidev_max || __omnidev_at - __omnidev_now > __omnidev_max )); then
        omnidev check --quiet || true
    fi
    unset __omnidev_dir __omnidev_at __omnidev_max __omnidev_now
fi
"#;

const ZSH: &str = r#"# omnidev: daily update check for omnigent (add to ~/.zshrc)
if [[ -o interactive ]] && [[ -z "${OMNIDEV_NO_UPDATE_CHECK:-}" ]] && (( ${+commands[omnidev]} )); then
    () {
        # Checked less than a day ago with nothing to offer: start nothing.
        local dir=${XDG_CACHE_HOME:-} at= max=
        [[ $dir == /* ]] || dir=$HOME/.cache
        { read -r at max < $dir/omnidev/omnigent-check.quiet } 2>/dev/null
        zmodload -F zsh/datetime p:EPOCHSECONDS 2>/dev/null
        if [[ $at == <-> && $max == <-> && ${EPOCHSECONDS:-} == <-> ]] \
            && (( EPOCHSECONDS - at < max && at - EPOCHSECONDS <= max )); then
            return 0
        fi
        omnidev check --quiet || true
    }
fi
"#;

const FISH: &str = r#"# omnidev: daily update check for omnigent (add to ~/.config/fish/config.fish)
if status is-interactive; and test -z "$OMNIDEV_NO_UPDATE_CHECK"; and command -q omnidev
    # Checked less than a day ago with nothing to offer: start nothing.
    set -l __omnidev_dir "$XDG_CACHE_HOME"
    string match -q '/*' -- $__omnidev_dir; or set __omnidev_dir $HOME/.cache
    set -l __omnidev_stamp $__omnidev_dir/omnidev/omnigent-check.quiet
    set -l __omnidev_age
    set -l __omnidev_at
    set -l __omnidev_max
    if test -f $__omnidev_stamp; and contains path (builtin -n)
        set __omnidev_age (path mtime --relative -- $__omnidev_stamp)
        read __omnidev_at __omnidev_max < $__omnidev_stamp
    end
    if not string match -qr '^-?[0-9]+$' -- "$__omnidev_age"; or not string match -qr '^[0-9]+$' -- "$__omnidev_max"
        or test $__omnidev_age -ge $__omnidev_max; or test (math -- -1 \* $__omnidev_age) -gt $__omnidev_max
        omnidev check --quiet; or true
    end
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
