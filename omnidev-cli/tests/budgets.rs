//! Memory and CPU budgets, attacked through the real binary: followers of
//! the control socket that never read, a TUI fed huge lines, a
//! `.gitignore` of 30,000 rules, watch rules beyond the inotify limit.
//! Figures are the system's of the omnidev process (resident memory, CPU
//! time, through `omnidev_core::platform`), never the wall clock.

#[path = "support/context.rs"]
mod support;

#[path = "support/budgets.rs"]
mod shared;

use std::io::Write as _;
use std::os::unix::net::UnixStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use omnidev_test_support::process::Reaped;
use shared::{many_rules, many_services_profile, printer_profile, watched_profile};
use support::{TestContext, wait_for};

const DEADLINE: Duration = Duration::from_secs(60);
const MIB: u64 = 1024 * 1024;

/// The resident memory of `pid`, in bytes.
fn rss(pid: u32) -> u64 {
    omnidev_core::platform::rss_kib(pid).map_or(0, |kib| kib * 1024)
}

/// The peak resident memory of `pid` so far, in bytes.
fn peak_rss(pid: u32) -> u64 {
    omnidev_core::platform::peak_rss_kib(pid).map_or(0, |kib| kib * 1024)
}

/// CPU time (user + system) `pid` has used.
fn cpu_time(pid: u32) -> Duration {
    omnidev_core::platform::cpu_time(pid).unwrap_or_default()
}

/// A pod that ends with the test: SIGTERM, then SIGKILL after 20 s.
struct Pod(Reaped);

impl Pod {
    fn pid(&self) -> u32 {
        self.0.id()
    }
}

/// A pod stopped when the test ends (SIGTERM, 20 s, then SIGKILL), also
/// when it fails. Every omnidev here is spawned with plain `Command`, not
/// `assert_cmd`: the budgets are the memory of the running process,
/// sampled while it works, not an outcome asserted after it exits.
fn pod(child: Child) -> Pod {
    let mut reaped = Reaped::new(child);
    reaped.grace = Duration::from_secs(20);
    Pod(reaped)
}

/// `omnidev up --headless` of `ctx`, its output discarded.
fn headless(ctx: &TestContext) -> Pod {
    pod(ctx
        .command()
        .args(["up", "--headless"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn omnidev"))
}

/// Spawns `command` (an `up --headless`) and hands each line it prints
/// to the receiver.
fn with_output(command: &mut std::process::Command) -> (Pod, std::sync::mpsc::Receiver<String>) {
    let mut child =
        command.stdout(Stdio::piped()).stderr(Stdio::null()).spawn().expect("spawn omnidev");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead as _;
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    (pod(child), rx)
}

/// Waits for a line holding `needle`, returning it.
fn wait_line(rx: &std::sync::mpsc::Receiver<String>, needle: &str) -> String {
    let start = Instant::now();
    loop {
        let line = rx
            .recv_timeout(DEADLINE.saturating_sub(start.elapsed()))
            .unwrap_or_else(|e| panic!("no line with {needle:?}: {e}"));
        if line.contains(needle) {
            return line;
        }
    }
}

/// Waits until the pod of `ctx` answers on its control socket.
fn control_socket(ctx: &TestContext) -> std::path::PathBuf {
    let mut socket = None;
    wait_for("the control socket", DEADLINE, || {
        socket = ctx
            .pod_dir()
            .map(|dir| dir.join("control.sock"))
            .filter(|path| UnixStream::connect(path).is_ok());
        socket.is_some()
    });
    socket.expect("socket")
}

fn printed(ctx: &TestContext) -> u64 {
    std::fs::read_to_string(ctx.repo.join("count"))
        .ok()
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// The finding: 32 `events -f --logs` followers that never read drove
/// omnidev from 17 MiB to about 850 MiB (each replay encoded whole, six
/// bytes a control byte), and it stayed at 140 MiB after they left. A
/// follower now reads the kept records through a cursor: stalled, it costs
/// the chunk it was being sent (64 KiB of records and the last one, here
/// 360 KB of JSON); gone, nothing.
#[test]
fn stalled_followers_cost_at_most_their_budget_and_their_memory_comes_back() {
    const FOLLOWERS: usize = 32;
    let ctx = TestContext::new();
    // Lines of 60,000 control bytes (JSON escapes each as six bytes),
    // about 6 MB a second.
    ctx.write("omnidev.toml", &printer_profile("'\\u0001' * 60000", 10, 0.1));
    let pod = headless(&ctx);
    let socket = control_socket(&ctx);
    // The pod keeps 4 MiB of lines: 70 of them fill it.
    wait_for("the kept lines to fill", DEADLINE, || printed(&ctx) >= 200);
    let before = rss(pod.pid());
    let followers: Vec<UnixStream> = (0..FOLLOWERS)
        .map(|_| {
            let mut stream = UnixStream::connect(&socket).expect("connect");
            stream
                .write_all(b"{\"cmd\":\"events\",\"follow\":true,\"logs\":true}\n")
                .expect("request");
            stream
        })
        .collect();
    // While they read nothing (the pod drops a reader that takes nothing
    // for 10 s), another 300 lines (18 MB, 108 MB as JSON) go by.
    let start = printed(&ctx);
    let mut peak = 0;
    while printed(&ctx) < start + 300 {
        peak = peak.max(rss(pod.pid()));
        std::thread::sleep(Duration::from_millis(20));
    }
    peak = peak.max(rss(pod.pid()));
    let budget = before + FOLLOWERS as u64 * MIB + 16 * MIB;
    eprintln!(
        "omnidev: {} MiB before, {} MiB peak with {FOLLOWERS} stalled followers",
        before / MIB,
        peak / MIB
    );
    assert!(
        peak < budget,
        "omnidev grew from {} MiB to {} MiB with {FOLLOWERS} stalled followers (budget {} MiB)",
        before / MIB,
        peak / MIB,
        budget / MIB
    );
    drop(followers);
    // Gone, they cost nothing: back near where it was.
    let mut now = rss(pod.pid());
    let settle = Instant::now();
    while now > before + 24 * MIB && settle.elapsed() < DEADLINE {
        std::thread::sleep(Duration::from_millis(100));
        now = rss(pod.pid());
    }
    eprintln!("omnidev: {} MiB after they left", now / MIB);
    assert!(
        now <= before + 24 * MIB,
        "omnidev kept {} MiB after its followers left ({} MiB before they came)",
        now / MIB,
        before / MIB
    );
}

/// `omnidev up` (the TUI) of `ctx` on a pseudo-terminal of 40 rows and
/// 120 columns, whose output is read and dropped.
fn tui(ctx: &TestContext) -> (Pod, support::Terminal) {
    let mut command = ctx.command();
    command.arg("up");
    let (child, terminal) = support::on_pty(command, Some((40, 120)), false);
    (pod(child), terminal)
}

/// The finding: a service printing a 5 MB line every 0.5 s drove the TUI
/// to 1.1–1.26 GiB in 30 s (each 64 KiB piece kept twice per pane, in
/// its service's pane and the combined one, 5,000 pieces each). The panes
/// now hold no lines: they show the supervisor's history, bounded in bytes.
#[test]
fn the_tui_fed_5_mb_lines_stays_within_its_budget() {
    let ctx = TestContext::new();
    ctx.write("omnidev.toml", &printer_profile("'x' * 5000000", 1, 0.5));
    let (pod, _terminal) = tui(&ctx);
    wait_for("the first line", DEADLINE, || printed(&ctx) >= 1);
    // 20 lines: 100 MB, 1,500 pieces of 64 KiB.
    let mut peak = 0;
    while printed(&ctx) < 21 {
        peak = peak.max(rss(pod.pid()));
        std::thread::sleep(Duration::from_millis(20));
    }
    peak = peak.max(peak_rss(pod.pid()));
    eprintln!("TUI: peak {} MiB after 100 MB of 5 MB lines", peak / MIB);
    assert!(
        peak < 200 * MIB,
        "the TUI grew to {} MiB on 100 MB of output (budget 200 MiB)",
        peak / MIB
    );
}

/// The finding: a `.gitignore` cost about 19 KB a rule (30,000 rules
/// 580 MB), compiled once per watch rule and twice while read again. The
/// checkout's rules are now compiled once for all its watchers.
#[test]
fn a_gitignore_of_30000_rules_is_held_once_per_checkout() {
    let ctx = TestContext::new();
    ctx.write(".gitignore", &many_rules(30_000));
    for name in ["a", "b", "c"] {
        ctx.write(&format!("{name}/app.py"), "x = 1\n");
    }
    ctx.write("omnidev.toml", &watched_profile(&["a", "b", "c"]));
    let (pod, rx) = with_output(ctx.command().args(["up", "--headless"]));
    let mut watching = 0;
    while watching < 3 {
        let line = rx.recv_timeout(DEADLINE * 5).expect("the watchers start");
        watching += usize::from(line.contains("reloads on changes"));
    }
    // An edit makes each watcher look at the rules.
    ctx.write("a/app.py", "x = 2\n");
    wait_line(&rx, "reloading a");
    let peak = peak_rss(pod.pid());
    eprintln!("gitignore: peak {} MiB with 30,000 rules", peak / MIB);
    assert!(
        peak < 200 * MIB,
        "omnidev reached {} MiB with a .gitignore of 30,000 rules (budget 200 MiB)",
        peak / MIB
    );
}

/// A checkout with three watch rules (`a`, `b`, `c`) of 40 directories
/// each.
fn three_watched_trees(ctx: &TestContext) {
    for name in ["a", "b", "c"] {
        for dir in 0..40 {
            ctx.write(&format!("{name}/d{dir}/m.py"), "x = 1\n");
        }
    }
    ctx.write("omnidev.toml", &watched_profile(&["a", "b", "c"]));
}

/// Takes `watches` inotify watches (on directories outside the checkout)
/// and holds them until its parent dies; writes `ready` once it holds them.
const HOG: &str = r"
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
libc.prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL
fd = libc.inotify_init()
for i in range(int(sys.argv[1])):
    path = os.path.join(sys.argv[2], str(i))
    os.makedirs(path, exist_ok=True)
    if libc.inotify_add_watch(fd, path.encode(), 0x100) < 0:
        sys.exit('inotify_add_watch: errno %d' % ctypes.get_errno())
open(sys.argv[3], 'w').write('ready')
time.sleep(1000)
";

/// `omnidev up --headless` of `ctx` in a user namespace of its own whose
/// inotify limit (`user.max_inotify_watches`, set by the namespace's root)
/// is `limit`, with another program of the same user holding `held`
/// watches: the limit is real without touching the machine's.
fn under_inotify_limit(ctx: &TestContext, limit: usize, held: usize) -> Command {
    let hog = ctx.root.join("hog.py");
    std::fs::write(&hog, HOG).expect("hog");
    let inner = ctx.command();
    let mut command = Command::new("unshare");
    command
        .args(["--user", "--map-root-user", "sh", "-c"])
        .arg(
            "echo $1 > /proc/sys/user/max_inotify_watches || exit 1
             python3 \"$3\" $2 \"$3.dirs\" \"$3.ready\" &
             while [ ! -e \"$3.ready\" ]; do kill -0 $! || exit 1; sleep 0.05; done
             exec \"$0\" up --headless",
        )
        .arg(env!("CARGO_BIN_EXE_omnidev"))
        .args([limit.to_string(), held.to_string()])
        .arg(&hog)
        .current_dir(inner.get_current_dir().expect("cwd"));
    for (key, value) in inner.get_envs() {
        match value {
            Some(value) => command.env(key, value),
            None => command.env_remove(key),
        };
    }
    command
}

/// omnidev uses at most a second of CPU over the next 5 s.
fn assert_idle(pod: &Pod) {
    let before = cpu_time(pod.pid());
    let window = Instant::now();
    while window.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(100));
    }
    let used = cpu_time(pod.pid()).saturating_sub(before);
    assert!(used < Duration::from_secs(1), "omnidev used {used:?} of CPU in 5 s");
}

/// The rules of a pod share one budget, half of the user's inotify limit
/// (here 100): the rule that does not fit in what the others left is not
/// watched, and says so before any watch is taken.
#[test]
fn watch_rules_share_one_budget_of_half_the_inotify_limit() {
    let ctx = TestContext::new();
    three_watched_trees(&ctx);
    let (pod, rx) = with_output(&mut under_inotify_limit(&ctx, 100, 0));
    wait_line(&rx, "a reloads on changes to a/**/*.py");
    let refused = wait_line(&rx, "b is not reloaded on changes");
    assert!(refused.contains("the 9 directory watches left of the pod's share"), "{refused}");
    ctx.write("a/d3/m.py", "x = 2\n");
    wait_line(&rx, "reloading a");
    assert_idle(&pod);
}

/// Three watch rules of 40 directories each, every one within the pod's
/// share, but another program holds most of the user's watches: the
/// finding was omnidev at 185% CPU forever, watching again and again. A
/// rule that cannot be watched says by how much and is not watched; one
/// that reaches the limit later stops watching, once; the pod runs and the
/// CPU stays idle.
#[test]
fn watch_rules_beyond_the_inotify_limit_degrade_once_and_stay_idle() {
    let ctx = TestContext::new();
    three_watched_trees(&ctx);
    // 400 watches, 200 of them the pod's share, 310 held by another
    // program: `a` and `b` (41 directories and the checkout's root each)
    // fit, `c` finds 6.
    let (pod, rx) = with_output(&mut under_inotify_limit(&ctx, 400, 310));
    let refused = wait_line(&rx, "c is not reloaded on changes");
    assert!(
        refused.contains("needs 42 inotify watches and only 6 could be added (36 short)"),
        "{refused}"
    );
    wait_line(&rx, "c started");
    // The others reload.
    ctx.write("b/d3/m.py", "x = 2\n");
    wait_line(&rx, "reloading b");
    // New directories take `a` over the limit: it stops watching, once.
    for dir in 40..80 {
        ctx.write(&format!("a/d{dir}/m.py"), "x = 1\n");
    }
    let stopped = wait_line(&rx, "a is no longer reloaded on changes");
    assert!(stopped.contains("max_user_watches"), "{stopped}");
    assert_idle(&pod);
    // It said so once, and `a` is not watched any more.
    ctx.write("a/d3/m.py", "x = 2\n");
    ctx.write("b/d4/m.py", "x = 2\n");
    let until_b = wait_line(&rx, "reloading b");
    let later: Vec<String> = rx.try_iter().collect();
    assert!(
        !later.iter().any(|l| l.contains("no longer") || l.contains("reloading a")),
        "{until_b} {later:?}"
    );
}

/// `profile check` of 5,000 services under an `[env]` of 10,000 entries
/// (a 0.7 MB profile): the pod's environment is shared by every service,
/// never copied per service, so the cost follows the profile's size (it
/// was 7.6 GiB and 39 s). The peak is the child's own, from `wait4`.
#[test]
fn a_profile_of_many_services_and_env_entries_costs_its_size() {
    let ctx = TestContext::new();
    ctx.write("omnidev.toml", &many_services_profile(5_000, 10_000));
    let started = Instant::now();
    let child =
        ctx.command().args(["profile", "check"]).stdout(Stdio::null()).spawn().expect("spawn");
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to fill.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: pid is our child, not yet waited for; both pointers are
    // valid for the call.
    let waited = unsafe { libc::wait4(pid, &raw mut status, 0, &raw mut usage) };
    assert_eq!(waited, pid, "wait4");
    let took = started.elapsed();
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
    // ru_maxrss is in KiB on Linux.
    let peak = u64::try_from(usage.ru_maxrss).expect("positive") * 1024;
    eprintln!("profile check: peak {} MiB in {took:?}", peak / MIB);
    assert!(peak < 200 * MIB, "peak {} MiB", peak / MIB);
    // Generous for a busy machine and a debug build (0.3 s alone).
    assert!(took < Duration::from_secs(20), "{took:?}");
    drop(child);
}
