//! macOS, through its documented interfaces: `sysctl(KERN_PROC_PID)` for a
//! process's state, parent, group and start time, `getsid(2)` for its
//! session, `sysctl(KERN_PROCARGS2)` for its arguments and environment
//! (readable for the user's own processes), and libproc
//! (`proc_listpids`, `proc_pidinfo`, `proc_pidfdinfo`, through the
//! `libproc` crate) for the process list, children, names, descriptors
//! and the TCP sockets they hold. There is no subreaper: orphans go to
//! launchd. How the raw answers are read is in [`super::macos_raw`].

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use libproc::libproc::bsd_info::BSDInfo;
use libproc::libproc::file_info::{ListFDs, ProcFDInfo, ProcFDType, pidfdinfo};
use libproc::libproc::net_info::{SocketFDInfo, SocketInfoKind};
use libproc::libproc::proc_pid::{kproc_info_raw, listpidinfo, pidinfo};
use libproc::libproc::task_info::TaskInfo;
use libproc::processes::{ProcFilter, pids_by_type};
use nix::unistd::Pid;

use super::ProcessStat;
use super::macos_raw;
use super::net::TcpSocket;

/// macOS has no subreaper: orphans go to launchd.
pub const HAS_SUBREAPER: bool = false;

/// A pid as the system calls take it; pid 0 (the kernel) is no process of
/// anyone's.
fn raw(pid: u32) -> Option<i32> {
    i32::try_from(pid).ok().filter(|&p| p > 0)
}

/// From `sysctl(KERN_PROC_PID)`; the session from `getsid`.
pub fn stat(pid: u32) -> Option<ProcessStat> {
    let p = raw(pid)?;
    let info = kproc_info_raw(p).ok()?;
    if info.kp_proc.p_pid != p {
        return None;
    }
    // The session is not in kinfo_proc (only a kernel pointer to it).
    let sid = nix::unistd::getsid(Some(Pid::from_raw(p))).map_or(-1, Pid::as_raw);
    let started = info.kp_proc.p_un;
    Some(ProcessStat {
        pid,
        state: macos_raw::state_letter(info.kp_proc.p_stat),
        ppid: u32::try_from(info.kp_eproc.e_ppid).unwrap_or(0),
        pgid: info.kp_eproc.e_pgid,
        sid,
        start_time: macos_raw::start_time(started.tv_sec, started.tv_usec)?,
    })
}

/// From `proc_listpids`.
pub fn pids() -> Vec<u32> {
    pids_by_type(ProcFilter::All).unwrap_or_default().into_iter().filter(|&pid| pid > 0).collect()
}

/// The largest `KERN_PROCARGS2` answer (`kern.argmax`), 1 MiB where it
/// cannot be read.
fn arg_max() -> usize {
    let mut mib = [libc::CTL_KERN, libc::KERN_ARGMAX];
    let mut value: libc::c_int = 0;
    let mut size = std::mem::size_of::<libc::c_int>();
    // SAFETY: the mib names an int, and `value` is one, `size` its size.
    let rc = unsafe {
        libc::sysctl(
            mib.as_mut_ptr(),
            2,
            (&raw mut value).cast(),
            &raw mut size,
            std::ptr::null_mut(),
            0,
        )
    };
    if rc == 0 { usize::try_from(value).unwrap_or(1 << 20).clamp(4096, 16 << 20) } else { 1 << 20 }
}

/// The raw `KERN_PROCARGS2` of `pid`: its arguments and environment
/// (another user's process cannot be read).
fn procargs(pid: u32) -> Option<Vec<u8>> {
    let p = raw(pid)?;
    let mut buffer = vec![0u8; arg_max()];
    let mut size = buffer.len();
    let mut mib = [libc::CTL_KERN, libc::KERN_PROCARGS2, p];
    // SAFETY: `buffer` is writable for `size` bytes; the kernel writes at
    // most that many and sets `size` to what it wrote.
    let rc = unsafe {
        libc::sysctl(
            mib.as_mut_ptr(),
            3,
            buffer.as_mut_ptr().cast(),
            &raw mut size,
            std::ptr::null_mut(),
            0,
        )
    };
    if rc != 0 {
        return None;
    }
    buffer.truncate(size);
    Some(buffer)
}

/// From `KERN_PROCARGS2` (the user's own processes only).
pub fn env_var(pid: u32, name: &str) -> Option<String> {
    macos_raw::parse_procargs(&procargs(pid)?)?.var(name)
}

/// From `KERN_PROCARGS2` (the user's own processes only).
pub fn cmdline(pid: u32) -> String {
    procargs(pid)
        .and_then(|buffer| Some(macos_raw::parse_procargs(&buffer)?.command_line()))
        .unwrap_or_default()
}

/// From `proc_name` (at most 16 bytes).
pub fn name(pid: u32) -> Option<String> {
    libproc::libproc::proc_pid::name(raw(pid)?).ok()
}

/// From `proc_listpids` by parent.
pub fn children(pid: u32) -> Vec<u32> {
    pids_by_type(ProcFilter::ByParentProcess { ppid: pid }).unwrap_or_default()
}

/// Always false: macOS has no subreaper.
pub fn become_subreaper() -> bool {
    false
}

/// The Darwin background band (`PRIO_DARWIN_BG`) of the leader.
pub fn set_background(leader: u32, on: bool) -> bool {
    let band = if on { libc::PRIO_DARWIN_BG } else { 0 };
    // SAFETY: setpriority takes three integers and reads no memory of ours.
    unsafe { libc::setpriority(libc::PRIO_DARWIN_PROCESS, leader, band) == 0 }
}

/// Whether the process is in the Darwin background band.
pub fn in_background(pid: u32) -> Option<bool> {
    // SAFETY: errno is this thread's; getpriority takes two integers.
    unsafe {
        *libc::__error() = 0;
        let band = libc::getpriority(libc::PRIO_DARWIN_PROCESS, pid);
        (*libc::__error() == 0).then_some(band != 0)
    }
}

/// The descriptors of `pid` (the user's own processes).
fn fds(pid: u32) -> Option<Vec<ProcFDInfo>> {
    let p = raw(pid)?;
    let info = pidinfo::<BSDInfo>(p, 0).ok()?;
    listpidinfo::<ListFDs>(p, info.pbi_nfiles as usize).ok()
}

/// From `proc_pidinfo` (the user's own processes).
pub fn open_fds(pid: u32) -> Option<usize> {
    Some(fds(pid)?.len())
}

/// Not asked of macOS (it would take a `proc_pidfdinfo` per descriptor
/// for diagnostics only).
pub fn open_paths(_pid: u32) -> Option<Vec<PathBuf>> {
    None
}

/// From `proc_pidinfo(PROC_PIDTASKINFO)`, in Mach time units.
pub fn cpu_time(pid: u32) -> Option<Duration> {
    let info = pidinfo::<TaskInfo>(raw(pid)?, 0).ok()?;
    let units = info.pti_total_user.saturating_add(info.pti_total_system);
    let (numer, denom) = timebase();
    Some(Duration::from_nanos(macos_raw::mach_to_nanos(units, numer, denom)))
}

/// The Mach timebase (`numer / denom` nanoseconds per unit).
#[allow(deprecated)] // libc points to the mach2 crate; the call is the same.
fn timebase() -> (u32, u32) {
    let mut info = libc::mach_timebase_info { numer: 1, denom: 1 };
    // SAFETY: `info` is a valid mach_timebase_info to fill.
    if unsafe { libc::mach_timebase_info(&raw mut info) } != 0 {
        return (1, 1);
    }
    (info.numer, info.denom)
}

/// From `proc_pidinfo(PROC_PIDTASKINFO)`.
pub fn rss_kib(pid: u32) -> Option<u64> {
    let info = pidinfo::<TaskInfo>(raw(pid)?, 0).ok()?;
    Some(info.pti_resident_size / 1024)
}

/// macOS keeps no per-process peak of resident memory.
pub fn peak_rss_kib(_pid: u32) -> Option<u64> {
    None
}

/// Not asked of macOS (diagnostics only).
pub fn threads(_pid: u32) -> Option<Vec<String>> {
    None
}

/// FSEvents watches a tree with one stream: there is no per-user limit.
pub fn watch_limit() -> Option<usize> {
    None
}

/// There is no per-user limit to count against.
pub fn watches_held() -> Option<usize> {
    None
}

pub(crate) fn own_cgroup_files() -> Result<(String, String), String> {
    Err("cgroups are Linux-only".to_owned())
}

/// Only the descriptors of processes this one may inspect (the user's
/// own) can be read.
pub const SEES_OTHER_USERS: bool = false;

/// The TCP sockets `pid` holds, with their ids (`soi_so`).
fn tcp_sockets(pid: u32) -> Vec<TcpSocket> {
    let (Some(p), Some(fds)) = (raw(pid), fds(pid)) else {
        return Vec::new();
    };
    fds.iter()
        .filter(|fd| matches!(ProcFDType::from(fd.proc_fdtype), ProcFDType::Socket))
        .filter_map(|fd| pidfdinfo::<SocketFDInfo>(p, fd.proc_fd).ok())
        .filter(|info| matches!(SocketInfoKind::from(info.psi.soi_kind), SocketInfoKind::Tcp))
        .filter_map(|info| {
            // SAFETY: soi_kind says the union holds TCP socket info; its
            // address union is read as the member insi_vflag names.
            let tcp = unsafe { info.psi.soi_proto.pri_tcp };
            let ini = tcp.tcpsi_ini;
            let (v4, v6) =
                unsafe { (ini.insi_laddr.ina_46.i46a_addr4.s_addr, ini.insi_laddr.ina_6.s6_addr) };
            Some(TcpSocket {
                address: macos_raw::socket_address(ini.insi_vflag, v4, v6)?,
                port: macos_raw::socket_port(ini.insi_lport),
                listening: macos_raw::is_listening(tcp.tcpsi_state),
                uid: info.psi.soi_stat.vst_uid,
                id: info.psi.soi_so,
            })
        })
        .collect()
}

/// The listeners on `port` among every process whose descriptors can be
/// read; one socket held by several processes is listed once. Always an
/// answer (the seam's `None` is for a Linux whose `/proc/net` is hidden).
#[allow(clippy::unnecessary_wraps)]
pub fn listeners(port: u16) -> Option<Vec<TcpSocket>> {
    let mut seen = BTreeSet::new();
    Some(
        pids()
            .into_iter()
            .flat_map(tcp_sockets)
            .filter(|s| s.port == port && s.listening && seen.insert(s.id))
            .collect(),
    )
}

/// Every socket `pid` holds (TCP or not), by `soi_so`.
pub fn socket_ids(pid: u32) -> BTreeSet<u64> {
    let (Some(p), Some(fds)) = (raw(pid), fds(pid)) else {
        return BTreeSet::new();
    };
    fds.iter()
        .filter(|fd| matches!(ProcFDType::from(fd.proc_fdtype), ProcFDType::Socket))
        .filter_map(|fd| pidfdinfo::<SocketFDInfo>(p, fd.proc_fd).ok())
        .map(|info| info.psi.soi_so)
        .collect()
}
