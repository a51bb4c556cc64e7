//! The fallback without cgroups: a service's processes found by session,
//! process group, parentage, and the service id in their environment.

use std::collections::{BTreeMap, BTreeSet};

use crate::platform::ProcessStat;

/// The environment variable every service process starts with; its value
/// (`<supervisor pid>.<its start time>.<n>.<service index>`, `n` counting
/// the supervisors of that process) finds a
/// process that left the service's session and parentage.
pub const SERVICE_ID_ENV: &str = "OMNIDEV_SERVICE_ID";

/// What identifies one service's processes without a cgroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GroupIdentity {
    /// The leader's pid, which is also its session and group id; `None`
    /// when the pid now belongs to someone else (then only the service id
    /// identifies its processes).
    pub(crate) leader: Option<u32>,
    /// The leader's start time: no member of its session started earlier.
    pub(crate) since: Option<u64>,
    /// The value of [`SERVICE_ID_ENV`] its processes carry.
    pub(crate) service_id: String,
}

/// Where to look for processes carrying the service id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Search {
    /// Only among orphans adopted by `me` (a live supervisor, cheap).
    Adopted,
    /// Among every process (leftovers of a supervisor that died).
    Everywhere,
}

/// The live (non-zombie) processes of a service in `table`: its leader,
/// every process of its session or group that is not older than the
/// leader, every process carrying its service id (see [`Search`]), and all
/// their descendants. `me` and pid 1 are never included.
pub(crate) fn members(
    table: &[ProcessStat],
    identity: &GroupIdentity,
    me: u32,
    search: Search,
    service_id_of: impl Fn(u32) -> Option<String>,
) -> Vec<u32> {
    let since = identity.since.unwrap_or(0);
    let live = table.iter().filter(|p| !p.is_zombie() && p.pid != me && p.pid > 1);
    let mut found: BTreeSet<u32> = BTreeSet::new();
    for p in live {
        let in_session = identity.leader.is_some_and(|leader| {
            let session = leader as i32;
            (p.sid == session || p.pgid == session || p.pid == leader) && p.start_time >= since
        });
        let searched = match search {
            Search::Adopted => p.ppid == me,
            Search::Everywhere => true,
        };
        let tagged = searched
            && !identity.service_id.is_empty()
            && service_id_of(p.pid).is_some_and(|id| id == identity.service_id);
        if in_session || tagged {
            found.insert(p.pid);
        }
    }
    with_descendants(table, found, me)
}

/// `roots` and every live descendant of them in `table` (never `me`).
pub(crate) fn with_descendants(table: &[ProcessStat], roots: BTreeSet<u32>, me: u32) -> Vec<u32> {
    let mut found = roots;
    let mut children: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for p in table.iter().filter(|p| !p.is_zombie() && p.pid != me) {
        children.entry(p.ppid).or_default().push(p.pid);
    }
    let mut todo: Vec<u32> = found.iter().copied().collect();
    while let Some(pid) = todo.pop() {
        for &child in children.get(&pid).map_or(&[][..], Vec::as_slice) {
            if found.insert(child) {
                todo.push(child);
            }
        }
    }
    found.into_iter().collect()
}

/// The value of [`SERVICE_ID_ENV`] in process `pid`'s environment (as it
/// was at `exec`), when readable.
pub(crate) fn service_id_of(pid: u32) -> Option<String> {
    crate::platform::env_var(pid, SERVICE_ID_ENV)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The processes a search stops are those of this very pod or service:
    /// an id that only shares a prefix with it (another pod's, another
    /// service's) is never matched.
    #[test]
    fn only_the_exact_identity_matches() {
        let table = [p(10, 1, 10, 10, 5), p(11, 1, 11, 11, 5), p(12, 1, 12, 12, 5)];
        let ids = |pid: u32| match pid {
            10 => Some("7.9.0.1".to_owned()),
            11 => Some("7.9.0.10".to_owned()),
            12 => Some("7.9.0.1 ".to_owned()),
            _ => None,
        };
        let identity =
            GroupIdentity { leader: None, since: None, service_id: "7.9.0.1".to_owned() };
        assert_eq!(members(&table, &identity, 2, Search::Everywhere, ids), [10]);
    }

    fn p(pid: u32, ppid: u32, pgid: i32, sid: i32, start_time: u64) -> ProcessStat {
        ProcessStat { pid, ppid, pgid, sid, state: 'S', start_time }
    }

    #[test]
    fn finds_session_group_descendants_and_tagged_orphans() {
        let me = 10;
        let table = vec![
            p(me, 1, 10, 10, 1),
            // The leader (session 100) and a helper in its group.
            p(100, me, 100, 100, 50),
            p(101, 100, 100, 100, 51),
            // setpgid(0,0): same session, own group.
            p(102, 100, 102, 100, 52),
            // setsid child of the leader: found by parentage.
            p(103, 100, 103, 103, 53),
            p(104, 103, 103, 103, 54),
            // Double fork + setsid: adopted by `me`, found by its id.
            p(105, me, 105, 105, 55),
            // An older process that happens to reuse the session id.
            p(106, 1, 100, 100, 10),
            // Someone else's process.
            p(107, 1, 107, 107, 60),
            // An adopted orphan of another service.
            p(108, me, 108, 108, 61),
        ];
        let identity =
            GroupIdentity { leader: Some(100), since: Some(50), service_id: "9.1.0".into() };
        let ids = |pid| match pid {
            105 => Some("9.1.0".to_owned()),
            108 => Some("9.1.1".to_owned()),
            _ => None,
        };
        let found = members(&table, &identity, me, Search::Adopted, ids);
        assert_eq!(found, [100, 101, 102, 103, 104, 105]);
    }

    #[test]
    fn a_dead_leader_still_finds_its_session_and_tagged_processes() {
        let table =
            vec![p(101, 1, 100, 100, 51), p(103, 1, 103, 103, 53), p(104, 103, 103, 103, 54)];
        let identity =
            GroupIdentity { leader: Some(100), since: Some(50), service_id: "9.1.0".into() };
        let ids = |pid| (pid == 103).then(|| "9.1.0".to_owned());
        assert_eq!(members(&table, &identity, 5, Search::Everywhere, ids), [101, 103, 104]);
        // Without searching everywhere the orphan (parent 1) is missed.
        assert_eq!(members(&table, &identity, 5, Search::Adopted, ids), [101]);
    }
}
