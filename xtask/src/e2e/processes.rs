//! The process walker: which live processes carry a case's tag
//! (`OMNIDEV_E2E_TAG`, inherited by everything a pod starts), asked of the
//! system through `omnidev_core::platform`.

/// The environment variable carrying a case's tag into every process it starts.
pub(super) const TAG_VAR: &str = "OMNIDEV_E2E_TAG";

/// `(pid, command line)` of every live process whose `OMNIDEV_E2E_TAG`
/// satisfies `matches`.
pub(super) fn tagged_processes(matches: impl Fn(&str) -> bool) -> Vec<(u32, String)> {
    let me = std::process::id();
    omnidev_core::platform::pids()
        .into_iter()
        .filter(|&pid| pid != me)
        .filter(|&pid| {
            omnidev_core::platform::env_var(pid, TAG_VAR).is_some_and(|value| matches(&value))
        })
        .filter(|&pid| omnidev_core::platform::stat(pid).is_some_and(|s| !s.is_zombie()))
        .map(|pid| (pid, omnidev_core::platform::cmdline(pid)))
        .collect()
}

pub(super) fn describe(processes: &[(u32, String)]) -> String {
    processes
        .iter()
        .map(|(pid, cmd)| format!("       pid {pid}: {cmd}"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use std::process::Command;
    use std::time::Duration;

    use super::*;

    #[test]
    fn tagged_processes_finds_live_tagged_children_only() {
        let tag = format!("unit-{}", std::process::id());
        let mut child =
            Command::new("sleep").arg("30").env(TAG_VAR, &tag).spawn().expect("spawn sleep");
        // Until `sleep` has exec'd, /proc shows the parent's environment
        // (no tag): wait for the new image rather than read once.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let found = loop {
            let found = tagged_processes(|value| value == tag);
            if !found.is_empty() || std::time::Instant::now() > deadline {
                break found;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].0, child.id());
        assert!(found[0].1.starts_with("sleep 30"), "{found:?}");
        assert!(tagged_processes(|value| value == tag).is_empty());
    }
}
