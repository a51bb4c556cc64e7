//! macOS. Not read yet: every answer is "unknown" (the behaviour omnidev
//! had there before the seam), so callers degrade as without `/proc`.

use std::collections::BTreeSet;
use std::path::PathBuf;

use super::ProcessStat;
use super::net::TcpSocket;

pub(super) const NAME: &str = "process groups and sessions (no subreaper on macOS)";

pub(super) fn stat(_pid: u32) -> Option<ProcessStat> {
    None
}

pub(super) fn pids() -> Vec<u32> {
    Vec::new()
}

pub(super) fn env_var(_pid: u32, _name: &str) -> Option<String> {
    None
}

pub(super) fn cmdline(_pid: u32) -> String {
    String::new()
}

pub(super) fn name(_pid: u32) -> Option<String> {
    None
}

pub(super) fn children(_pid: u32) -> Vec<u32> {
    Vec::new()
}

pub(super) fn become_subreaper() -> bool {
    false
}

pub(super) fn cpu_time(_pid: u32) -> Option<std::time::Duration> {
    None
}

pub(super) fn open_fds(_pid: u32) -> Option<usize> {
    None
}

pub(super) fn open_paths(_pid: u32) -> Option<Vec<PathBuf>> {
    None
}

pub(super) fn rss_kib(_pid: u32) -> Option<u64> {
    None
}

pub(super) fn peak_rss_kib(_pid: u32) -> Option<u64> {
    None
}

pub(super) fn threads(_pid: u32) -> Option<Vec<String>> {
    None
}

pub(super) fn watch_limit() -> Option<usize> {
    None
}

pub(super) fn watches_held() -> Option<usize> {
    None
}

pub(super) fn own_cgroup_files() -> Result<(String, String), String> {
    Err("cgroups are Linux-only".to_owned())
}

pub(super) const SEES_OTHER_USERS: bool = false;

pub(super) fn listeners(_port: u16) -> Option<Vec<TcpSocket>> {
    None
}

pub(super) fn socket_ids(_pid: u32) -> BTreeSet<u64> {
    BTreeSet::new()
}
