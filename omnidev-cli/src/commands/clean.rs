//! `omnidev clean`: remove this checkout's pod directory (never while the
//! pod runs, never anything outside it).

use std::path::Path;
use std::process::ExitCode;

use omnidev_pod::{Pod, PodLock};

use crate::cli::CleanArgs;
use crate::error::Error;

/// Runs `omnidev clean`.
pub fn run(args: &CleanArgs) -> miette::Result<ExitCode> {
    let checkout = crate::session::resolve_checkout(&args.pod)?;
    let pod_dir = &checkout.pod_dir;
    if !pod_dir.exists() {
        eprintln!(
            "omnidev: nothing to clean ({} does not exist)",
            pod_dir.display()
        );
        return Ok(ExitCode::SUCCESS);
    }
    check_is_pod(pod_dir, &checkout.cache_root, args.pod.pod_dir.is_some())?;
    // Holding the lock while removing keeps an `omnidev up` from starting
    // halfway through; it fails (naming the pid) while the pod runs.
    let lock = PodLock::acquire(pod_dir).map_err(Error::from)?;
    Pod::clean(pod_dir).map_err(Error::from)?;
    drop(lock);
    eprintln!("omnidev: removed {}", pod_dir.display());
    Ok(ExitCode::SUCCESS)
}

/// A directory may be removed when it sits directly under the cache root
/// (where omnidev puts pods), or was named with `--pod-dir` and holds a
/// `pod.toml`.
fn check_is_pod(pod_dir: &Path, cache_root: &Path, explicit: bool) -> Result<(), Error> {
    let canonical = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    let dir = canonical(pod_dir);
    let under_root = dir.parent() == Some(canonical(cache_root).as_path());
    let has_record = dir.join(omnidev_pod::ports::POD_TOML).is_file();
    if dir.is_dir() && (under_root || (explicit && has_record)) {
        Ok(())
    } else {
        Err(Error::NotAPod {
            path: pod_dir.to_path_buf(),
            cache_root: cache_root.to_path_buf(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_pod_directories_qualify() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path().join("cache/omnidev");
        let pod = root.join("app-12345678");
        let elsewhere = tmp.path().join("work");
        std::fs::create_dir_all(&pod).expect("mkdir");
        std::fs::create_dir_all(&elsewhere).expect("mkdir");
        assert!(check_is_pod(&pod, &root, false).is_ok());
        assert!(check_is_pod(&elsewhere, &root, true).is_err());
        std::fs::write(elsewhere.join("pod.toml"), "").expect("write");
        assert!(check_is_pod(&elsewhere, &root, false).is_err());
        assert!(check_is_pod(&elsewhere, &root, true).is_ok());
        assert!(check_is_pod(tmp.path(), &root, false).is_err());
    }
}
