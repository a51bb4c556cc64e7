//! Executable scripts (fake tools on a test's `PATH`), written so that
//! running one never fails with ETXTBSY.
//!
//! Tests of one binary run on threads of one process, and many fork. A
//! script written through a descriptor of the test process is open for
//! writing until the write returns; a sibling test that forks meanwhile
//! holds a copy of that descriptor until its child execs, and exec of the
//! script in that window fails with "Text file busy". The script is
//! therefore written by a `cp` child, which never forks: once it has
//! exited, nothing has the file open for writing.

use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Writes `#!/bin/sh`, a newline and `body` to `path` (replacing what is
/// there) through a `cp` child, and makes it executable (mode 755); `path`.
///
/// ```
/// let dir = tempfile::tempdir().expect("tempdir");
/// let tool = omnidev_test_support::write_script(&dir.path().join("tool"), "echo hi\n");
/// let out = std::process::Command::new(&tool).output().expect("run it");
/// assert_eq!(out.stdout, b"hi\n");
/// ```
pub fn write_script(path: &Path, body: &str) -> PathBuf {
    let mut cp = Command::new("cp")
        .arg("/dev/stdin")
        .arg(path)
        .stdin(Stdio::piped())
        .spawn()
        .expect("run cp");
    let mut stdin = cp.stdin.take().expect("cp's stdin");
    stdin.write_all(format!("#!/bin/sh\n{body}").as_bytes()).expect("write the script to cp");
    drop(stdin);
    let status = cp.wait().expect("wait for cp");
    assert!(status.success(), "cp of {} failed: {status}", path.display());
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    path.to_path_buf()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// Two threads fork without pause while scripts are written and run:
    /// written with `std::fs::write` instead, about 3 in 100 runs failed
    /// with ETXTBSY on a 2-core machine.
    #[test]
    fn a_script_runs_while_other_threads_fork() {
        let dir = tempfile::tempdir().expect("tempdir");
        let stop = Arc::new(AtomicBool::new(false));
        let forkers: Vec<_> = (0..2)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        let _ = Command::new("true").status();
                    }
                })
            })
            .collect();
        let failures: Vec<String> = (0..300)
            .filter_map(|i| {
                let script = write_script(&dir.path().join(format!("s{i}")), "exit 0\n");
                match Command::new(&script).status() {
                    Ok(status) if status.success() => None,
                    Ok(status) => Some(format!("{i}: {status}")),
                    Err(error) => Some(format!("{i}: {error}")),
                }
            })
            .collect();
        stop.store(true, Ordering::Relaxed);
        for forker in forkers {
            forker.join().expect("forker");
        }
        assert!(failures.is_empty(), "{failures:?}");
    }
}
