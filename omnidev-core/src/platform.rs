//! The one place omnidev asks the operating system about processes and
//! sockets, for every omnidev crate, their tests and xtask: a process's
//! state, parent, group, session and start time, its children, one
//! variable of its environment, its command line and name, the table of
//! every process, the owner of a listening socket (in [`net`]), making this
//! process a reaper of orphans, and a few figures tests and benchmarks read
//! (open descriptors, peak memory).
//!
//! Each operating system has one implementation behind this module: Linux
//! reads `/proc` (and is the only code that names it); macOS asks
//! `sysctl(KERN_PROC)` and `libproc`. Where the system cannot say
//! something, the answer is `None` (or empty) and the caller degrades: it
//! never gets a made-up answer.

pub mod net;

#[cfg(target_os = "linux")]
mod linux;
#[cfg(target_os = "linux")]
use linux as os;

#[cfg(target_os = "macos")]
mod macos;
#[cfg(target_os = "macos")]
use macos as os;

// The macOS side's reading of raw answers, unit-tested on every system.
#[cfg(any(target_os = "macos", test))]
mod macos_raw;

#[cfg(not(any(target_os = "linux", target_os = "macos")))]
compile_error!("omnidev runs on Linux and macOS only (see omnidev_core::platform)");

// Each system's module gives the same functions and constants, used
// through these names; each is documented where Linux implements it
// (`linux.rs`), and `macos.rs` says where macOS answers differently.
pub use os::{
    HAS_SUBREAPER, become_subreaper, children, cmdline, cpu_time, env_var, in_background, name,
    open_fds, open_paths, peak_rss_kib, pids, rss_kib, set_background, stat, threads, watch_limit,
    watches_held,
};
// The text of this process's mount table and of its cgroup membership
// (Linux), or why there are none.
pub(crate) use os::own_cgroup_files;

/// What omnidev knows of one process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessStat {
    /// The process id.
    pub pid: u32,
    /// The state letter (`R`, `S`, `D`, `T`, `Z` for a zombie, …).
    pub state: char,
    /// The parent's pid.
    pub ppid: u32,
    /// The process group.
    pub pgid: i32,
    /// The session.
    pub sid: i32,
    /// When it started, in the system's own unit (clock ticks since boot
    /// on Linux, microseconds since the epoch on macOS): only compared
    /// with other start times of the same machine. With the pid, it
    /// identifies a process across pid reuse.
    pub start_time: u64,
}

impl ProcessStat {
    /// Whether it has exited and waits to be reaped.
    pub fn is_zombie(&self) -> bool {
        self.state == 'Z'
    }
}

/// The stat of every process (empty where the system does not list them).
pub fn table() -> Vec<ProcessStat> {
    pids().into_iter().filter_map(stat).collect()
}

/// What a process tree holds now: its resident memory and the CPU time its
/// processes have used, as the system already counts them (`/proc` on
/// Linux, `libproc` on macOS); read when asked, never sampled.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    serde::Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub struct Usage {
    /// Resident memory, in bytes: the sum of each process's RSS (pages two
    /// of them share count twice), or where the service has a cgroup with
    /// the memory controller, what the kernel charges it (`memory.current`,
    /// its page cache included).
    pub rss_bytes: u64,
    /// CPU time used by the processes alive now (user and system), in
    /// milliseconds.
    pub cpu_ms: u64,
    /// The processes counted.
    pub processes: u32,
}

impl Usage {
    /// Adds process `pid`; false when it is gone.
    fn count(&mut self, pid: u32) -> bool {
        let Some(rss) = rss_kib(pid) else {
            return false;
        };
        self.rss_bytes += rss * 1024;
        let cpu = cpu_time(pid).unwrap_or_default().as_millis();
        self.cpu_ms += u64::try_from(cpu).unwrap_or(u64::MAX);
        self.processes += 1;
        true
    }

    /// `other` added to this.
    pub fn add(&mut self, other: Usage) {
        self.rss_bytes += other.rss_bytes;
        self.cpu_ms += other.cpu_ms;
        self.processes += other.processes;
    }
}

/// `bytes` in MiB, to a tenth, for people: `212.4 MiB`.
///
/// ```
/// assert_eq!(omnidev_core::platform::mib(3 * 1024 * 1024 / 2), "1.5 MiB");
/// ```
pub fn mib(bytes: u64) -> String {
    let tenths = bytes.saturating_mul(10) / (1024 * 1024);
    format!("{}.{} MiB", tenths / 10, tenths % 10)
}

/// The most processes of one tree [`tree_usage`] counts.
const TREE_MAX: usize = 4096;

/// The [`Usage`] of process `pid` and every process below it (at most
/// 4096); nothing when `pid` is gone.
///
/// ```
/// let usage = omnidev_core::platform::tree_usage(std::process::id());
/// assert!(usage.rss_bytes > 0 && usage.processes >= 1);
/// ```
pub fn tree_usage(pid: u32) -> Usage {
    let mut usage = Usage::default();
    let mut next = vec![pid];
    let mut seen = 0;
    while let Some(pid) = next.pop() {
        if seen == TREE_MAX {
            break;
        }
        seen += 1;
        if usage.count(pid) {
            next.extend(children(pid));
        }
    }
    usage
}

/// The [`Usage`] of the processes `pids` (those still alive), without
/// what runs below them: a cgroup's members, say, which are all of it.
pub fn usage_of(pids: &[u32]) -> Usage {
    let mut usage = Usage::default();
    for &pid in pids.iter().take(TREE_MAX) {
        usage.count(pid);
    }
    usage
}

/// Programs that start the real service as their one child and wait for
/// it: `uv run` and `uvx` (Python's own pid is the one its log prints).
pub const WRAPPERS: [&str; 2] = ["uv", "uvx"];

/// The process people mean by a service's pid: `pid` itself, or, while it
/// is one of the [`WRAPPERS`] with exactly one child, that child (followed
/// at most three levels). `None` while `pid` is a wrapper that has started
/// no child yet (a first `uv run` syncs the environment for many seconds
/// before it starts Python); `pid` for a wrapper with several children,
/// or where the system cannot tell.
pub fn main_process(pid: u32) -> Option<u32> {
    let mut current = pid;
    for _ in 0..3 {
        if !is_wrapper(current) {
            break;
        }
        match children(current).as_slice() {
            [] if current == pid => return None,
            [only] => current = *only,
            _ => break,
        }
    }
    Some(current)
}

/// Whether process `pid` runs one of the [`WRAPPERS`].
fn is_wrapper(pid: u32) -> bool {
    name(pid).is_some_and(|name| WRAPPERS.contains(&name.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wrapper_is_seen_through_to_its_one_child() {
        // A real `uv run` would need a project; a program named `uv` that
        // starts one child and waits shows the same shape. It starts none
        // until told to, through a fifo.
        let dir = tempfile::tempdir().expect("tempdir");
        let (uv, go) = (dir.path().join("uv"), dir.path().join("go"));
        nix::unistd::mkfifo(&go, nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");
        let script = format!("read x < '{}'\nsleep 30 &\nwait\n", go.display());
        omnidev_test_support::write_script(&uv, &script);
        let mut wrapper = std::process::Command::new(&uv).spawn().expect("spawn");
        let pid = wrapper.id();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let wait_for = |want: &dyn Fn(Option<u32>) -> bool| {
            let mut main = main_process(pid);
            while !want(main) && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(20));
                main = main_process(pid);
            }
            main
        };
        let before = wait_for(&|main| main.is_none());
        std::fs::write(&go, "go\n").expect("tell it to start its child");
        let main = wait_for(&|main| main.is_some_and(|m| m != pid));
        let child_name = main.and_then(name).unwrap_or_default();
        if let Some(main) = main {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(main.cast_signed()),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        let _ = wrapper.kill();
        let _ = wrapper.wait();
        assert_eq!(before, None, "a wrapper without a child: not known yet");
        assert_eq!(child_name, "sleep", "the wrapper's child is the main process");
        // Not a wrapper: the pid itself.
        let own = std::process::id();
        assert_eq!(main_process(own), Some(own));
    }

    #[test]
    fn own_process_is_read_consistently() {
        let me = std::process::id();
        let a = stat(me).expect("own stat");
        let b = stat(me).expect("own stat");
        assert_eq!(a.pid, me);
        assert_eq!(a.start_time, b.start_time);
        assert!(a.start_time > 0);
        assert!(!a.is_zombie());
        assert!(table().iter().any(|p| p.pid == me && p.ppid == a.ppid));
        assert!(env_var(me, "PATH").is_some());
        assert!(env_var(me, "OMNIDEV_PROC_TEST_SURELY_UNSET").is_none());
        assert!(!cmdline(me).is_empty());
        assert!(open_fds(me).is_some_and(|n| n >= 3), "stdin, stdout, stderr");
        assert!(rss_kib(me).is_some_and(|kib| kib > 0));
        assert!(peak_rss_kib(me).is_some_and(|kib| kib > 0));
        assert!(threads(me).is_some_and(|t| !t.is_empty()));
    }

    #[test]
    fn children_are_listed() {
        let mut child = std::process::Command::new("sleep").arg("30").spawn().expect("spawn");
        let listed = children(std::process::id()).contains(&child.id());
        let _ = child.kill();
        let _ = child.wait();
        assert!(listed);
    }
}
