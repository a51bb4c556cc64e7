//! cgroup v2 (Linux): finding omnidev's own cgroup, creating a pod's
//! cgroup under it, and listing, signalling, killing and removing one.

use std::io;
use std::path::{Component, Path, PathBuf};

/// Prefix of every pod cgroup's name (`omnidev-<pid>-<start time>-<n>`); a
/// recorded path is only acted on when its pod directory carries it.
pub(crate) const POD_PREFIX: &str = "omnidev-";

/// Where the unified (cgroup2) hierarchy is mounted and which of its paths
/// the mount shows at its top, from the text of `/proc/self/mountinfo`.
pub(crate) fn unified_mount(mountinfo: &str) -> Option<(PathBuf, String)> {
    mountinfo.lines().find_map(|line| {
        // `id parent major:minor root mount-point options … - type source …`
        let (before, after) = line.split_once(" - ")?;
        if after.split_whitespace().next()? != "cgroup2" {
            return None;
        }
        let mut fields = before.split_whitespace();
        let root = fields.nth(3)?;
        let mount = fields.next()?;
        Some((PathBuf::from(unescape(mount)), unescape(root)))
    })
}

/// mountinfo escapes space, tab, newline and backslash as octal.
fn unescape(field: &str) -> String {
    let mut out = String::with_capacity(field.len());
    let mut rest = field;
    while let Some(i) = rest.find('\\') {
        out.push_str(&rest[..i]);
        let code = rest.get(i + 1..i + 4).and_then(|d| u8::from_str_radix(d, 8).ok());
        if let Some(byte) = code {
            out.push(char::from(byte));
            rest = &rest[i + 4..];
        } else {
            out.push('\\');
            rest = &rest[i + 1..];
        }
    }
    out.push_str(rest);
    out
}

/// This process's path in the unified hierarchy, from the text of
/// `/proc/self/cgroup` (the `0::` line).
pub(crate) fn own_path(proc_cgroup: &str) -> Option<String> {
    proc_cgroup.lines().find_map(|l| l.strip_prefix("0::")).map(str::to_owned)
}

/// The directory of this process's own cgroup, or why there is none.
pub(crate) fn own_dir() -> Result<(PathBuf, PathBuf), String> {
    let (mountinfo, cgroup) = crate::platform::own_cgroup_files()?;
    let (mount, root) =
        unified_mount(&mountinfo).ok_or_else(|| "no cgroup2 hierarchy is mounted".to_owned())?;
    let path = own_path(&cgroup)
        .ok_or_else(|| "this process is in no cgroup v2 (no `0::` line)".to_owned())?;
    let dir = join_under(&mount, &root, &path).ok_or_else(|| {
        format!("this process's cgroup {path} is outside the cgroup2 mount at {}", mount.display())
    })?;
    Ok((mount, dir))
}

/// `mount` + `path` relative to the mount's `root`.
pub(crate) fn join_under(mount: &Path, root: &str, path: &str) -> Option<PathBuf> {
    let relative = if root == "/" {
        path.trim_start_matches('/')
    } else {
        let rest = path.strip_prefix(root)?;
        if !(rest.is_empty() || rest.starts_with('/')) {
            return None;
        }
        rest.trim_start_matches('/')
    };
    let relative = relative.trim_end_matches(" (deleted)");
    let mut dir = mount.to_path_buf();
    for component in Path::new(relative).components() {
        match component {
            Component::Normal(part) => dir.push(part),
            Component::CurDir => {}
            _ => return None,
        }
    }
    Some(dir)
}

/// Creates the pod cgroup `<own>/<name>` and checks it can be used: it
/// has `cgroup.kill` (Linux 5.14+) and both it and omnidev's own
/// `cgroup.procs` are writable (moving a process needs both).
pub(crate) fn create_pod(own: &Path, name: &str) -> Result<PathBuf, String> {
    let dir = own.join(name);
    match std::fs::create_dir(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("cannot create {}: {e}", dir.display())),
    }
    let fail = |reason: String| {
        let _ = std::fs::remove_dir(&dir);
        Err(reason)
    };
    if !dir.join("cgroup.kill").exists() {
        return fail(format!(
            "{} has no cgroup.kill (Linux 5.14 or later is needed)",
            dir.display()
        ));
    }
    for procs in [own.join("cgroup.procs"), dir.join("cgroup.procs")] {
        if let Err(e) = writable(&procs) {
            return fail(format!("cannot write {}: {e}", procs.display()));
        }
    }
    Ok(dir)
}

/// Asks for the memory and cpu controllers below the pod cgroup `dir`,
/// each on its own (best effort: the kernel grants one only where
/// omnidev's own cgroup passes it down); which of them it has now.
pub(crate) fn enable_controllers(dir: &Path) -> Controllers {
    let control = dir.join("cgroup.subtree_control");
    for controller in ["+memory", "+cpu"] {
        let _ = std::fs::write(&control, controller);
    }
    let enabled = std::fs::read_to_string(&control).unwrap_or_default();
    let has = |name: &str| enabled.split_whitespace().any(|c| c == name);
    Controllers { memory: has("memory"), cpu: has("cpu") }
}

/// Which controllers the kernel gives a cgroup: whether it enforces a
/// memory limit and a CPU limit there.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Controllers {
    pub(crate) memory: bool,
    pub(crate) cpu: bool,
}

/// The CPU period `cpu.max` is written with, in microseconds.
const CPU_PERIOD_US: u64 = 100_000;

/// Writes `limits` into cgroup `dir` (`memory.max`, `cpu.max`; `max` where
/// none is set) for the controllers it has.
pub(crate) fn set_limits(dir: &Path, limits: crate::spec::Limits, has: Controllers) {
    if has.memory {
        let max = limits.memory_max.map_or("max".to_owned(), |b| b.to_string());
        let _ = std::fs::write(dir.join("memory.max"), max);
    }
    if has.cpu {
        let quota = (limits.cpu_max).map_or("max".to_owned(), |p| {
            (u64::from(p) * CPU_PERIOD_US / 100).max(1000).to_string()
        });
        let _ = std::fs::write(dir.join("cpu.max"), format!("{quota} {CPU_PERIOD_US}"));
    }
}

/// What the kernel counts of cgroup `dir`'s memory (`memory.current`),
/// where its memory controller is on.
pub(crate) fn memory_current(dir: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(dir.join("memory.current")).ok()?;
    text.trim().parse().ok()
}

/// How many times the kernel killed a process of cgroup `dir` for its
/// memory limit (`oom_kill` of `memory.events`; 0 without one).
pub(crate) fn oom_kills(dir: &Path) -> u64 {
    std::fs::read_to_string(dir.join("memory.events"))
        .unwrap_or_default()
        .lines()
        .find_map(|line| line.strip_prefix("oom_kill "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

fn writable(path: &Path) -> io::Result<()> {
    std::fs::OpenOptions::new().write(true).open(path).map(drop)
}

/// Creates the leaf cgroup `dir` unless it exists (a process is then
/// started inside it: `crate::process::Placement::Cgroup`).
pub(crate) fn create_leaf(dir: &Path) -> io::Result<()> {
    match std::fs::create_dir(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

/// Every process in `dir` and the cgroups below it.
pub(crate) fn members(dir: &Path) -> Vec<u32> {
    let mut pids = Vec::new();
    collect(dir, &mut pids, 0);
    pids
}

fn collect(dir: &Path, pids: &mut Vec<u32>, depth: usize) {
    if depth > 32 {
        return;
    }
    if let Ok(text) = std::fs::read_to_string(dir.join("cgroup.procs")) {
        pids.extend(text.lines().filter_map(|l| l.trim().parse::<u32>().ok()));
    }
    for child in subdirectories(dir) {
        collect(&child, pids, depth + 1);
    }
}

fn subdirectories(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default()
}

/// Whether any process is left in `dir` or below (`cgroup.events`); a
/// cgroup that does not exist is empty.
pub(crate) fn populated(dir: &Path) -> bool {
    match std::fs::read_to_string(dir.join("cgroup.events")) {
        Ok(events) => events.lines().any(|l| l.split_whitespace().eq(["populated", "1"])),
        Err(_) => false,
    }
}

/// SIGKILLs every process in `dir` and below at once (`cgroup.kill`).
pub(crate) fn kill(dir: &Path) -> io::Result<()> {
    std::fs::write(dir.join("cgroup.kill"), b"1")
}

/// Removes `dir` and the cgroups below it, deepest first; a populated one
/// stays (and so do its parents).
pub(crate) fn remove(dir: &Path) {
    remove_at(dir, 0);
}

fn remove_at(dir: &Path, depth: usize) {
    if depth > 32 {
        return;
    }
    for child in subdirectories(dir) {
        remove_at(&child, depth + 1);
    }
    let _ = std::fs::remove_dir(dir);
}

/// Whether `path` (read from `state.json`) names a cgroup omnidev made:
/// inside the cgroup2 mount, plain components only, and inside a pod
/// cgroup named `omnidev-…`. Anything else is never killed.
pub(crate) fn is_pod_cgroup(mount: &Path, path: &Path) -> bool {
    let Ok(relative) = path.strip_prefix(mount) else {
        return false;
    };
    let parts: Vec<&str> = relative
        .components()
        .map(|c| match c {
            Component::Normal(part) => part.to_str(),
            _ => None,
        })
        .collect::<Option<_>>()
        .unwrap_or_default();
    parts.iter().any(|p| p.starts_with(POD_PREFIX))
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    #[test]
    fn finds_the_unified_mount_on_hybrid_and_pure_systems() {
        let (mount, root) = unified_mount(HYBRID).expect("hybrid");
        assert_eq!(mount, Path::new("/sys/fs/cgroup/unified"));
        assert_eq!(root, "/");
        let pure =
            "29 22 0:26 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate\n";
        assert_eq!(unified_mount(pure).expect("pure").0, Path::new("/sys/fs/cgroup"));
        assert!(unified_mount("32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw\n").is_none());
        let escaped = "41 31 0:38 / /mnt/my\\040cgroups rw - cgroup2 cgroup2 rw\n";
        assert_eq!(unified_mount(escaped).expect("escaped").0, Path::new("/mnt/my cgroups"));
    }

    #[test]
    fn own_path_joins_under_the_mount_root() {
        let text = "9:name=systemd:/\n4:memory:/x\n0::/user.slice/app.scope\n";
        let path = own_path(text).expect("unified line");
        assert_eq!(path, "/user.slice/app.scope");
        let mount = Path::new("/sys/fs/cgroup");
        assert_eq!(
            join_under(mount, "/", &path),
            Some(PathBuf::from("/sys/fs/cgroup/user.slice/app.scope"))
        );
        assert_eq!(
            join_under(mount, "/user.slice", &path),
            Some(PathBuf::from("/sys/fs/cgroup/app.scope"))
        );
        assert_eq!(join_under(mount, "/other", &path), None);
        assert_eq!(join_under(mount, "/", "/a/../b"), None);
        assert_eq!(own_path("1:cpu:/\n"), None);
    }

    #[test]
    fn only_pod_cgroups_under_the_mount_count_as_ours() {
        let mount = Path::new("/sys/fs/cgroup");
        assert!(is_pod_cgroup(mount, Path::new("/sys/fs/cgroup/user.slice/omnidev-42-7/0-web")));
        assert!(!is_pod_cgroup(mount, Path::new("/sys/fs/cgroup/system.slice")));
        assert!(!is_pod_cgroup(mount, Path::new("/tmp/omnidev-42-7/0-web")));
        assert!(!is_pod_cgroup(mount, Path::new("/sys/fs/cgroup/omnidev-1/../system.slice")));
    }
}
