//! Where omnidev keeps the install choice, the update-check cache and its lock.

use std::ffi::OsString;
use std::path::PathBuf;

use crate::{Error, Result};

/// File locations, resolved once from `XDG_CONFIG_HOME`, `XDG_CACHE_HOME`
/// and `HOME` (the same variables a test points into a temp directory).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paths {
    /// `${XDG_CONFIG_HOME:-~/.config}/omnidev`.
    pub config_dir: PathBuf,
    /// `${XDG_CACHE_HOME:-~/.cache}/omnidev`.
    pub cache_dir: PathBuf,
}

impl Paths {
    /// Resolves the locations from the process environment.
    pub fn from_env() -> Result<Self> {
        Self::from_vars(|name| std::env::var_os(name))
    }

    /// Resolves the locations from `lookup` (an environment stand-in).
    /// Empty or relative `XDG_*` values are ignored, as the XDG spec asks.
    pub fn from_vars(lookup: impl Fn(&str) -> Option<OsString>) -> Result<Self> {
        let dir = |variable: &str, default: &str| {
            omnidev_core::fs::xdg_home(lookup(variable), lookup("HOME"), default)
                .map(|root| root.join("omnidev"))
                .ok_or(Error::NoHome)
        };
        Ok(Self {
            config_dir: dir("XDG_CONFIG_HOME", ".config")?,
            // The pods' cache root, worked out where the pods' is.
            cache_dir: omnidev_core::fs::cache_root_from(lookup("XDG_CACHE_HOME"), lookup("HOME"))
                .ok_or(Error::NoHome)?,
        })
    }

    /// The saved install choice: `<config>/install.toml`.
    pub fn install_toml(&self) -> PathBuf {
        self.config_dir.join("install.toml")
    }

    /// The update-check cache: `<cache>/omnigent-check.json`.
    pub fn check_cache(&self) -> PathBuf {
        self.cache_dir.join("omnigent-check.json")
    }

    /// The single-flight lock of the background refresh.
    pub fn refresh_lock(&self) -> PathBuf {
        self.cache_dir.join("omnigent-refresh.lock")
    }

    /// The lock held by a running `install` or `update`.
    pub fn install_lock(&self) -> PathBuf {
        self.cache_dir.join("omnigent-install.lock")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<OsString> {
        let pairs: Vec<(String, String)> =
            pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        move |name| pairs.iter().find(|(k, _)| k == name).map(|(_, v)| OsString::from(v))
    }

    #[test]
    fn xdg_variables_win_over_home() {
        let paths = Paths::from_vars(vars(&[
            ("HOME", "/home/u"),
            ("XDG_CONFIG_HOME", "/cfg"),
            ("XDG_CACHE_HOME", "/cache"),
        ]))
        .expect("paths");
        assert_eq!(paths.install_toml(), Path::new("/cfg/omnidev/install.toml"));
        assert_eq!(paths.check_cache(), Path::new("/cache/omnidev/omnigent-check.json"));
    }

    #[test]
    fn home_fallback_and_relative_xdg_ignored() {
        let paths = Paths::from_vars(vars(&[("HOME", "/home/u"), ("XDG_CACHE_HOME", "rel")]))
            .expect("paths");
        assert_eq!(paths.config_dir, Path::new("/home/u/.config/omnidev"));
        assert_eq!(paths.cache_dir, Path::new("/home/u/.cache/omnidev"));
    }

    #[test]
    fn no_home_is_an_error() {
        assert!(matches!(Paths::from_vars(vars(&[])), Err(Error::NoHome)));
    }
}
