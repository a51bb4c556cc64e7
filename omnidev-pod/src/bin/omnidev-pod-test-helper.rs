//! A small helper process for omnidev-pod's integration tests (not a user tool).
//!
//! `allocate CACHE_ROOT RUNTIME_DIR POD_DIR REPO GO_FILE` waits until GO_FILE exists, then
//! allocates `server`/`vite` ports and prints `server=N vite=M`.
//! `hold-lock POD_DIR` takes the pod lock, spawns `sleep 300`, prints
//! `locked CHILD_PID` and waits to be killed.
//! `try-lock POD_DIR` tries the lock and prints the error, exiting 1 when refused.
//! `seed-limited FROM TO` seeds TO from FROM with files limited to 4 bytes
//! (`RLIMIT_FSIZE`, so the copy fails half-way) and prints the outcome.

use std::path::PathBuf;
use std::time::{Duration, Instant};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let code = match args.first().map(String::as_str) {
        Some("allocate") if args.len() == 6 => allocate(&args[1..]),
        Some("hold-lock") if args.len() == 2 => hold_lock(&args[1]),
        Some("try-lock") if args.len() == 2 => try_lock(&args[1]),
        Some("seed-limited") if args.len() == 3 => seed_limited(&args[1], &args[2]),
        _ => {
            eprintln!("usage: omnidev-pod-test-helper allocate|hold-lock|try-lock|seed-limited …");
            2
        }
    };
    std::process::exit(code);
}

fn allocate(args: &[String]) -> i32 {
    let [cache_root, runtime_dir, pod_dir, repo, go] = args else {
        return 2;
    };
    let go = PathBuf::from(go);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !go.exists() {
        if Instant::now() > deadline {
            eprintln!("timed out waiting for {}", go.display());
            return 1;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let bases = [("server".to_owned(), 46_000), ("vite".to_owned(), 46_010)];
    let request = omnidev_pod::PortRequest {
        cache_root: cache_root.as_ref(),
        runtime_dir: runtime_dir.as_ref(),
        pod_dir: pod_dir.as_ref(),
        repo: repo.as_ref(),
        bases: &bases,
        overrides: &std::collections::BTreeMap::default(),
    };
    match omnidev_pod::allocate_ports(&request) {
        Ok(ports) => {
            println!(
                "server={} vite={}",
                ports.get("server").unwrap_or(0),
                ports.get("vite").unwrap_or(0)
            );
            0
        }
        Err(e) => {
            eprintln!("{e}");
            1
        }
    }
}

fn hold_lock(pod_dir: &str) -> i32 {
    let lock = match omnidev_pod::PodLock::acquire(pod_dir.as_ref()) {
        Ok(lock) => lock,
        Err(e) => {
            eprintln!("{e}");
            return 1;
        }
    };
    let child = match std::process::Command::new("sleep").arg("300").spawn() {
        Ok(child) => child,
        Err(e) => {
            eprintln!("spawn sleep: {e}");
            return 1;
        }
    };
    println!("locked {}", child.id());
    loop {
        std::thread::sleep(Duration::from_secs(3600));
        let _ = &lock;
    }
}

fn try_lock(pod_dir: &str) -> i32 {
    match omnidev_pod::PodLock::acquire(pod_dir.as_ref()) {
        Ok(_) => {
            println!("acquired");
            0
        }
        Err(e) => {
            println!("{e}");
            1
        }
    }
}

fn seed_limited(from: &str, to: &str) -> i32 {
    let limit = libc::rlimit { rlim_cur: 4, rlim_max: libc::RLIM_INFINITY };
    // SAFETY: plain system calls on values owned here; ignoring SIGXFSZ
    // turns the limit into an EFBIG error instead of a fatal signal.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
        if libc::setrlimit(libc::RLIMIT_FSIZE, &raw const limit) != 0 {
            eprintln!("setrlimit failed");
            return 1;
        }
    }
    let outcome = omnidev_pod::seed::seed_file(&[PathBuf::from(from)], to.as_ref());
    println!("{outcome:?}");
    0
}
