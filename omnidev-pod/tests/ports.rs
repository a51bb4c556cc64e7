//! Port allocation against real sockets, real files and 32 real processes.

use std::collections::{BTreeMap, BTreeSet};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Stdio};

use omnidev_pod::{Error, PortRequest, Ports, allocate_ports, read_ports};

fn free_port() -> u16 {
    // Let the OS pick a port and release it: free right now.
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").port()
}

fn allocate(
    cache: &Path,
    pod: &Path,
    bases: &[(String, u16)],
    overrides: &BTreeMap<String, u16>,
) -> omnidev_pod::Result<Ports> {
    allocate_ports(&PortRequest {
        cache_root: cache,
        runtime_dir: &runtime_of(cache),
        pod_dir: pod,
        repo: Path::new("/src/app"),
        bases,
        overrides,
    })
}

/// The runtime directory the tests give a cache root: beside it.
fn runtime_of(cache: &Path) -> std::path::PathBuf {
    cache.with_file_name("run")
}

fn bases(server: u16, vite: u16) -> Vec<(String, u16)> {
    vec![("server".to_owned(), server), ("vite".to_owned(), vite)]
}

#[test]
fn persisted_pair_is_reused_and_repo_recorded() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cache = tmp.path().join("cache");
    let pod = cache.join("app-1");
    let b = bases(free_port(), free_port());
    let first = allocate(&cache, &pod, &b, &BTreeMap::new()).expect("first");
    let text = std::fs::read_to_string(pod.join("pod.toml")).expect("pod.toml");
    // Different bases now: the persisted pair still wins while it is free.
    let second = allocate(&cache, &pod, &bases(40_000, 40_100), &BTreeMap::new()).expect("second");
    assert_eq!(first, second);
    assert_eq!(std::fs::read_to_string(pod.join("pod.toml")).expect("read"), text);
    let record = read_ports(&pod).expect("record");
    assert_eq!(record.ports, first);
    assert_eq!(record.repo.as_deref(), Some(Path::new("/src/app")));
    assert_ne!(first.get("server"), first.get("vite"));
}

#[test]
fn a_port_held_by_a_listener_is_skipped_and_persisted_busy_port_replaced() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cache = tmp.path().join("cache");
    let pod = cache.join("app-1");
    let held = TcpListener::bind("127.0.0.1:0").expect("bind");
    let busy = held.local_addr().expect("addr").port();
    let ports =
        allocate(&cache, &pod, &[("server".to_owned(), busy)], &BTreeMap::new()).expect("allocate");
    let got = ports.get("server").expect("server");
    assert_ne!(got, busy);
    assert!(got > busy);

    // Now the persisted port becomes busy: a new one is chosen.
    // If someone else grabbed it meanwhile, it is just as busy.
    let hold_persisted = TcpListener::bind(("0.0.0.0", got)).ok();
    let again =
        allocate(&cache, &pod, &[("server".to_owned(), busy)], &BTreeMap::new()).expect("again");
    assert_ne!(again.get("server"), Some(got));
    drop(hold_persisted);
}

/// A name whose persisted port is taken moves; it never takes the
/// persisted port of a name after it, which stays that name's.
#[test]
fn a_moving_port_never_takes_the_persisted_port_of_another_name() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cache = tmp.path().join("cache");
    let pod = cache.join("app-1");
    std::fs::create_dir_all(&pod).expect("mkdir");
    let held = TcpListener::bind("127.0.0.1:0").expect("bind");
    let lost = held.local_addr().expect("addr").port();
    let vite = free_port();
    let record = format!("[ports]\nserver = {lost}\nvite = {vite}\n");
    std::fs::write(pod.join("pod.toml"), record).expect("write");
    // The server probes from vite's port, the first free one it meets.
    let ports = allocate(&cache, &pod, &bases(vite, vite), &BTreeMap::new()).expect("allocate");
    assert_eq!(ports.get("vite"), Some(vite), "{ports:?}");
    let server = ports.get("server").expect("server");
    assert!(server != lost && server != vite, "{ports:?}");
    drop(held);
}

#[test]
fn ports_claimed_by_a_sibling_pod_are_skipped() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cache = tmp.path().join("cache");
    let base = free_port();
    let sibling = cache.join("other-2");
    std::fs::create_dir_all(&sibling).expect("mkdir");
    std::fs::write(
        sibling.join("pod.toml"),
        format!("repo = \"/src/other\"\n\n[ports]\nserver = {base}\nvite = {}\n", base + 1),
    )
    .expect("write sibling");
    // A corrupt sibling must not break this pod's allocation.
    std::fs::create_dir_all(cache.join("broken-3")).expect("mkdir");
    std::fs::write(cache.join("broken-3/pod.toml"), "not toml [").expect("write");

    let ports =
        allocate(&cache, &cache.join("app-1"), &[("server".to_owned(), base)], &BTreeMap::new())
            .expect("allocate");
    let got = ports.get("server").expect("server");
    assert!(got != base && got != base + 1, "{got} collides with the sibling's claims");
}

#[test]
fn overrides_are_honoured_and_a_busy_override_is_a_clear_error() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cache = tmp.path().join("cache");
    let pod = cache.join("app-1");
    let forced = free_port();
    let overrides = BTreeMap::from([("server".to_owned(), forced)]);
    let ports = allocate(&cache, &pod, &bases(forced, forced), &overrides).expect("allocate");
    assert_eq!(ports.get("server"), Some(forced));
    assert_ne!(ports.get("vite"), Some(forced), "the forced port is not given to another name");

    let held = TcpListener::bind("127.0.0.1:0").expect("bind");
    let busy = held.local_addr().expect("addr").port();
    let before = std::fs::read_to_string(pod.join("pod.toml")).expect("read");
    let err =
        allocate(&cache, &pod, &bases(6767, 5173), &BTreeMap::from([("vite".to_owned(), busy)]))
            .expect_err("busy override");
    assert!(matches!(err, Error::PortBusy { port, .. } if port == busy));
    let message = err.to_string();
    assert!(message.contains(&busy.to_string()) && message.contains("vite"), "{message}");
    assert_eq!(std::fs::read_to_string(pod.join("pod.toml")).expect("read"), before);

    let err = allocate(&cache, &pod, &bases(6767, 5173), &BTreeMap::from([("db".to_owned(), 1)]))
        .expect_err("unknown name");
    assert!(err.to_string().contains("db"), "{err}");
}

#[test]
fn corrupt_pod_toml_is_an_error_and_left_as_it_was() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cache = tmp.path().join("cache");
    let pod = cache.join("app-1");
    std::fs::create_dir_all(&pod).expect("mkdir");
    let corrupt = "[ports]\nserver = \"not a number\"\n";
    std::fs::write(pod.join("pod.toml"), corrupt).expect("write");
    let err = allocate(&cache, &pod, &bases(6767, 5173), &BTreeMap::new()).expect_err("corrupt");
    let message = err.to_string();
    assert!(matches!(err, Error::CorruptState { .. }), "{message}");
    assert!(message.contains(&pod.join("pod.toml").display().to_string()), "{message}");
    assert!(message.contains("server") || message.contains("integer"), "{message}");
    assert_eq!(std::fs::read_to_string(pod.join("pod.toml")).expect("read"), corrupt);
    assert!(matches!(read_ports(&pod), Err(Error::CorruptState { .. })));
}

#[test]
fn read_ports_never_allocates() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let pod = tmp.path().join("pod");
    std::fs::create_dir_all(&pod).expect("mkdir");
    let err = read_ports(&pod).expect_err("none yet");
    assert!(matches!(err, Error::NoPorts { .. }), "{err}");
    assert!(!pod.join("pod.toml").exists());
}

#[test]
fn pod_dir_override_outside_the_cache_root_still_respects_siblings() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cache = tmp.path().join("cache");
    let base = free_port();
    let sibling = cache.join("other-2");
    std::fs::create_dir_all(&sibling).expect("mkdir");
    std::fs::write(sibling.join("pod.toml"), format!("[ports]\nserver = {base}\n")).expect("write");
    let custom = tmp.path().join("elsewhere/my-pod");
    let ports = allocate(&cache, &custom, &[("server".to_owned(), base)], &BTreeMap::new())
        .expect("allocate");
    assert_ne!(ports.get("server"), Some(base));
    assert!(custom.join("pod.toml").is_file());
}

#[test]
fn thirty_two_processes_of_several_cache_roots_allocating_at_once_get_distinct_ports() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let runtime = tmp.path().join("run");
    let go = tmp.path().join("go");
    let helper = env!("CARGO_BIN_EXE_omnidev-pod-test-helper");
    let children: Vec<_> = (0..32)
        .map(|i| {
            // Half share a cache root, the others each have their own (a
            // different XDG_CACHE_HOME): one runtime directory serves all.
            let cache = tmp.path().join(format!("cache{}", if i % 2 == 0 { 0 } else { i }));
            let pod = cache.join(format!("repo{i}-{i:08x}"));
            let child = Command::new(helper)
                .arg("allocate")
                .arg(&cache)
                .arg(&runtime)
                .arg(&pod)
                .arg(format!("/src/repo{i}"))
                .arg(&go)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn helper");
            (pod, child)
        })
        .collect();
    // Every helper is waiting for this file: they start allocating together.
    std::fs::write(&go, "").expect("go");

    let mut all = BTreeSet::new();
    for (pod, child) in children {
        let out = child.wait_with_output().expect("wait");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "helper failed: {stdout} {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let ports: Vec<u16> = stdout
            .split_whitespace()
            .map(|kv| kv.split_once('=').expect("k=v").1.parse().expect("port"))
            .collect();
        assert_eq!(ports.len(), 2, "{stdout}");
        let record = read_ports(&pod).expect("record");
        assert_eq!(record.ports.get("server"), Some(ports[0]));
        assert_eq!(record.ports.get("vite"), Some(ports[1]));
        all.extend(ports);
    }
    assert_eq!(all.len(), 64, "ports were handed out twice: {all:?}");
}

#[test]
fn pods_of_different_cache_roots_see_each_other_through_the_registry() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let runtime = tmp.path().join("run");
    // The second pod gets the port after the base and must find it free
    // again later: below the ephemeral range, no other test's socket
    // takes it meanwhile (seen under load with `free_port`).
    let base = omnidev_test_support::quiet_ports(2)[0];
    let request = |cache: &Path, pod: &Path| -> omnidev_pod::Result<Ports> {
        allocate_ports(&PortRequest {
            cache_root: cache,
            runtime_dir: &runtime,
            pod_dir: pod,
            repo: Path::new("/src/app"),
            bases: &[("server".to_owned(), base)],
            overrides: &BTreeMap::new(),
        })
    };
    let cache_a = tmp.path().join("a/omnidev");
    let cache_b = tmp.path().join("b/omnidev");
    let pod_a = cache_a.join("app-1");
    let pod_b = cache_b.join("app-1");
    let a = request(&cache_a, &pod_a).expect("a");
    let b = request(&cache_b, &pod_b).expect("b");
    assert_ne!(a.get("server"), b.get("server"));
    let registry = std::fs::read_to_string(runtime.join("pods.toml")).expect("registry");
    assert!(registry.contains("app-1"), "{registry}");

    // A pod that is gone no longer claims anything, and leaves the registry.
    std::fs::remove_dir_all(&pod_a).expect("remove a");
    let b_again = request(&cache_b, &pod_b).expect("b again");
    // b keeps its port, unless a process outside the test (this is a shared
    // machine) holds it now.
    let b_port = b.get("server").expect("b's port");
    assert!(
        b_again == b || !omnidev_pod::ports::is_port_free(b_port),
        "b moved from its port, which is free: {b:?} then {b_again:?}"
    );
    let registry = std::fs::read_to_string(runtime.join("pods.toml")).expect("registry");
    assert!(!registry.contains(&*pod_a.to_string_lossy()), "{registry}");
    assert_eq!(registry.matches("app-1").count(), 1, "{registry}");
}

#[test]
fn a_lost_port_is_moved_and_the_other_ports_kept() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cache = tmp.path().join("cache");
    let pod = cache.join("app-1");
    let b = bases(free_port(), free_port());
    let none = BTreeMap::new();
    let request = PortRequest {
        cache_root: &cache,
        runtime_dir: &runtime_of(&cache),
        pod_dir: &pod,
        repo: Path::new("/src/app"),
        bases: &b,
        overrides: &none,
    };
    let first = allocate_ports(&request).expect("allocate");
    let lost = first.get("server").expect("server");
    // The pod's own vite holds its port: it must not be moved or reused.
    let _vite = TcpListener::bind(("127.0.0.1", first.get("vite").expect("vite"))).ok();
    let _thief = TcpListener::bind(("127.0.0.1", lost)).ok();
    let moved = omnidev_pod::ports::relocate_port(&request, "server", "pid 1 (x)").expect("move");
    assert_ne!(moved, lost);
    assert_ne!(Some(moved), first.get("vite"));
    let record = read_ports(&pod).expect("record");
    assert_eq!(record.ports.get("server"), Some(moved));
    assert_eq!(record.ports.get("vite"), first.get("vite"));

    let forced = BTreeMap::from([("server".to_owned(), moved)]);
    let request = PortRequest { overrides: &forced, ..request };
    let err =
        omnidev_pod::ports::relocate_port(&request, "server", "pid 4242 (python3 -m http.server)")
            .expect_err("a forced port is never moved");
    assert!(matches!(err, Error::ForcedPortTaken { .. }), "{err}");
    let message = err.to_string();
    assert!(
        message.contains("pid 4242 (python3 -m http.server)")
            && message.contains(&moved.to_string()),
        "{message}"
    );
    assert_eq!(read_ports(&pod).expect("record").ports.get("server"), Some(moved));
}

#[test]
fn rejected_port_set_ups_name_the_problem_and_write_nothing() {
    use omnidev_pod::ports::check_overrides;
    let b = bases(6767, 5173);
    let cases: [(&[(String, u16)], &str); 4] = [
        (
            &[("server".to_owned(), 7711), ("vite".to_owned(), 7711)],
            "`server` and `vite` are both forced to port 7711",
        ),
        (
            &[("server".to_owned(), 7000), ("server".to_owned(), 7001)],
            "`server` is forced twice, to 7000 and to 7001",
        ),
        (&[("vite".to_owned(), 0)], "port 0 given for `vite`"),
        (&[("db".to_owned(), 7000)], "unknown port name `db`"),
    ];
    for (given, expected) in cases {
        let err = check_overrides(given, &b).expect_err(expected);
        assert!(err.to_string().contains(expected), "{err} (wanted {expected})");
    }
    assert_eq!(
        check_overrides(&[("server".to_owned(), 7000), ("server".to_owned(), 7000)], &b)
            .expect("the same value twice is fine")
            .len(),
        1
    );

    let tmp = tempfile::tempdir().expect("tempdir");
    let cache = tmp.path().join("cache");
    let pod = cache.join("app-1");
    let err =
        allocate(&cache, &pod, &[("server".to_owned(), 0)], &BTreeMap::new()).expect_err("base 0");
    assert!(err.to_string().contains("base port of `server` is 0"), "{err}");
    let clash = BTreeMap::from([("server".to_owned(), 7711), ("vite".to_owned(), 7711)]);
    let err = allocate(&cache, &pod, &b, &clash).expect_err("clash");
    assert!(matches!(err, Error::PortConflict { .. }), "{err}");
    assert!(!pod.join("pod.toml").exists());
}

#[test]
fn a_corrupt_registry_is_an_error_naming_it_and_no_claim_is_lost() {
    let tmp = tempfile::tempdir().expect("tempdir");
    // Two pods of different cache roots: only the registry links them.
    let cache_a = tmp.path().join("a/cache");
    let cache_b = tmp.path().join("b/cache");
    let run = tmp.path().join("run");
    let base = free_port();
    let request = |cache: &Path, pod: &Path| -> omnidev_pod::Result<Ports> {
        allocate_ports(&PortRequest {
            cache_root: cache,
            runtime_dir: &run,
            pod_dir: pod,
            repo: Path::new("/src/app"),
            bases: &[("server".to_owned(), base)],
            overrides: &BTreeMap::new(),
        })
    };
    let pod_a = cache_a.join("app-a");
    let a = request(&cache_a, &pod_a).expect("a");
    let registry = run.join("pods.toml");
    let corrupt = "pods = [\"/x\"\n";
    std::fs::write(&registry, corrupt).expect("corrupt");
    let err = request(&cache_b, &cache_b.join("app-b")).expect_err("corrupt registry");
    assert!(matches!(err, Error::CorruptRegistry { .. }), "{err:?}");
    assert!(err.to_string().contains(&registry.display().to_string()), "{err}");
    assert_eq!(std::fs::read_to_string(&registry).expect("read"), corrupt, "left as it was");
    // Fixed by hand, the other pod's claim is honoured.
    std::fs::write(
        &registry,
        format!("pods = [\"{}\"]\n", pod_a.canonicalize().expect("canon").display()),
    )
    .expect("fix");
    let b = request(&cache_b, &cache_b.join("app-b")).expect("b");
    assert_ne!(a.get("server"), b.get("server"));
}

#[test]
fn a_planted_ports_lock_link_is_refused_and_its_target_untouched() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cache = tmp.path().join("cache");
    let run = runtime_of(&cache);
    std::fs::create_dir_all(&run).expect("mkdir");
    let victim = tmp.path().join("victim");
    std::fs::write(&victim, "precious").expect("write");
    std::os::unix::fs::symlink(&victim, run.join("ports.lock")).expect("symlink");
    let err =
        allocate(&cache, &cache.join("app"), &bases(free_port(), free_port()), &BTreeMap::new())
            .expect_err("a link");
    assert!(err.to_string().contains("symbolic link"), "{err}");
    assert_eq!(std::fs::read_to_string(&victim).expect("read"), "precious");
}
