//! Prints the pod directory and the ports omnidev would give a checkout,
//! using `omnidev-pod` alone: find the checkout root, load its profile (its
//! `omnidev.toml`, else the built-in one), create its pod directory and
//! allocate its ports under the per-user allocation lock that every omnidev
//! on this machine shares — so the ports never collide with a running pod.
//!
//! ```text
//! pod-info [PATH]     (PATH: anywhere inside the checkout; default ".")
//! ```

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let start = std::env::args_os()
        .nth(1)
        .map_or_else(|| PathBuf::from("."), PathBuf::from);
    match run(start) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("pod-info: {error}");
            ExitCode::FAILURE
        }
    }
}

fn run(start: PathBuf) -> omnidev_pod::Result<()> {
    let repo = omnidev_pod::find_repo_root(&start)?;
    let (profile, source) = omnidev_pod::Profile::load(&repo, None)?;
    let cache_root = omnidev_pod::pod::cache_root()?;
    let pod = omnidev_pod::Pod::create(
        omnidev_pod::pod::default_pod_dir(&cache_root, &repo),
        &profile.pod.dirs,
    )?;
    let runtime_dir = omnidev_pod::runtime::runtime_dir();
    let bases = profile.port_bases(&Default::default());
    // The ports recorded for this pod, or new ones, under the shared lock.
    let ports = omnidev_pod::ports::ensure_ports(&omnidev_pod::PortRequest {
        cache_root: &cache_root,
        runtime_dir: &runtime_dir,
        pod_dir: pod.dir(),
        repo: &repo,
        bases: &bases,
        overrides: &Default::default(),
    })?;
    println!("checkout  {}", repo.display());
    println!("profile   {source:?}");
    println!("pod dir   {}", pod.dir().display());
    for (name, port) in ports.iter() {
        println!("port      {name} = {port}");
    }
    Ok(())
}
