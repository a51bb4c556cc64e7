//! Cases: ports and the control socket that are provably the pod's own —
//! a control socket for a pod directory too long for a socket address.

use std::os::unix::ffi::OsStrExt;

use anyhow::{Context, Result, ensure};

use super::control::{omnidev_ok, pod_dir, service_state};
use super::{Ctx, SOON, UP};

/// Longest `sun_path` on Linux, the NUL included.
const SUN_PATH: usize = 108;

/// A checkout named like a long branch, so that `<pod>/control.sock`
/// would not fit a socket address: `up --detach`, `status` and `stop`
/// work, through the pointer in the pod directory.
pub fn long_pod_path_detach_status_stop(ctx: &mut Ctx) -> Result<()> {
    let name = format!(
        "wt-{}",
        "feature-branch-with-a-long-descriptive-name-".repeat(3)
    );
    let repo = ctx.checkout(&name)?;
    let out = omnidev_ok(ctx, &repo, &["up", "--detach", "--no-vite"], UP)?;
    ensure!(out.contains("server http://localhost:"), "{out}");

    let status = omnidev_ok(ctx, &repo, &["status", "--json"], SOON)?;
    ensure!(status.contains("\"running\": true"), "{status}");
    ensure!(status.contains("\"control\": true"), "{status}");
    let dir = pod_dir(&status)?;
    let pointer = dir.join("control.sock");
    let length = pointer.as_os_str().as_bytes().len();
    ensure!(
        length >= SUN_PATH,
        "the pod path is not long enough for this case ({length} bytes): {}",
        pointer.display()
    );
    let socket = std::fs::read_link(&pointer)
        .with_context(|| format!("{} is not a pointer to the socket", pointer.display()))?;
    ensure!(
        socket.starts_with(ctx.runtime_home()) && socket.as_os_str().len() < SUN_PATH,
        "the socket {} is not a short path in the runtime directory",
        socket.display()
    );
    ensure!(
        service_state(&status, "server")? == "ready",
        "server is not ready:\n{status}"
    );

    omnidev_ok(ctx, &repo, &["stop"], UP)?;
    let status = omnidev_ok(ctx, &repo, &["status", "--json"], SOON)?;
    ensure!(status.contains("\"running\": false"), "{status}");
    ensure!(
        std::fs::symlink_metadata(&pointer).is_err() && !socket.exists(),
        "the socket or its pointer was left after stop"
    );
    ctx.wait_no_pod_process(SOON)
}
