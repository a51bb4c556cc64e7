//! The file system of a pod, attacked through the real binary: planted
//! symbolic links, directories without omnidev's pod identity, a `cp -a`
//! copy of a running pod, a corrupt port registry, an unreadable cache
//! root, the detached pod's own log across runs, a very long checkout name.

#[path = "support/context.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use predicates::prelude::*;
use predicates::str::contains;
use support::{TestContext, listing, wait_for};

const DEADLINE: Duration = Duration::from_secs(60);

/// One service that says a word and exits.
const ONCE: &str = "[services.ok]\ncommand = [\"echo\", \"hello\"]\nrestart = \"never\"\n";

/// One service that says `word` and stays up (ready after a second).
fn staying(word: &str) -> String {
    format!(
        "[services.stay]\ncommand = [\"sh\", \"-c\", \"echo {word}; while true; do sleep 0.2; done\"]\ngrace-ms = 2000\n"
    )
}

#[test]
fn planted_links_in_a_pod_are_refused_and_their_targets_untouched() {
    let ctx = TestContext::new();
    ctx.write("omnidev.toml", ONCE);
    ctx.run_ok(&["up", "--headless"]);
    let pod = ctx.pod_dir().expect("pod");
    let victim = ctx.root.join("victim");
    std::fs::write(&victim, "precious\n").expect("write");

    // `name` made a link to the victim: `args` must stop, naming the link,
    // and leave the victim as it was.
    let refused = |name: &str, args: &[&str]| {
        let link = pod.join(name);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&victim, &link).expect("symlink");
        ctx.assert(args).code(1).stderr(contains("symbolic link"));
        assert_eq!(std::fs::read_to_string(&victim).expect("victim"), "precious\n");
        std::fs::remove_file(&link).expect("rm");
    };
    // The lock's target was truncated and got the pid; the detached log's
    // got the pod's whole output.
    refused("omnidev.lock", &["up", "--headless"]);
    refused("logs/omnidev.log", &["up", "--detach"]);
}

#[test]
fn a_directory_without_the_pod_identity_is_never_removed() {
    let ctx = TestContext::new();
    ctx.write("omnidev.toml", ONCE);
    let dir = ctx.root.join("work");
    std::fs::create_dir_all(dir.join("src")).expect("mkdir");
    std::fs::write(dir.join("src/main.c"), "int main;\n").expect("write");
    // Every name of the layout, each with any content.
    for name in ["state.json", "pod.toml", "omnidev.lock", "control.sock"] {
        std::fs::write(dir.join(name), "anything\n").expect("write");
    }
    let nothing = ctx.root.join("nothing-skipped");
    let before = listing(&dir, &nothing);
    for args in [&["clean", "--pod-dir"][..], &["up", "--headless", "--clean", "--pod-dir"]] {
        // 2: a `--pod-dir` that is not a pod (docs/control.md, exit codes).
        ctx.cmd().args(args).arg(&dir).assert().code(2).stderr(
            contains(format!("{} is not an omnidev pod", dir.display()))
                .and(contains("no .omnidev-pod identity")),
        );
        assert_eq!(listing(&dir, &nothing), before, "{args:?}");
    }
}

#[test]
fn cleaning_a_copy_of_a_running_pod_leaves_the_original_answering() {
    let ctx = TestContext::new();
    ctx.write("omnidev.toml", &staying("up"));
    let _stop = ctx.stop_on_drop();
    ctx.run_ok(&["up", "--detach"]);
    let pod = ctx.pod_dir().expect("pod");
    let copy = ctx.root.join("copy");
    let status =
        std::process::Command::new("cp").arg("-a").arg(&pod).arg(&copy).status().expect("cp");
    assert!(status.success());
    let original_pid = |ctx: &TestContext| -> serde_json::Value {
        let status = ctx.json(&["status", "--json"]);
        assert_eq!(status["control"], true, "{status}");
        status["services"][0]["pid"].clone()
    };
    let before = original_pid(&ctx);
    // Run in the copy: it becomes a pod of its own; the original's
    // recorded processes are not its to stop.
    let copy_arg = copy.to_str().expect("utf-8").to_owned();
    let _stop_copy = ctx.stop_on_drop_with(["--pod-dir", copy_arg.as_str()]);
    ctx.run_ok(&["up", "--detach", "--pod-dir", &copy_arg]);
    assert_eq!(original_pid(&ctx), before, "the original's service was touched");
    ctx.run_ok(&["stop", "--pod-dir", &copy_arg]);
    assert_eq!(original_pid(&ctx), before);
    // And cleaned as a copy again.
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("rm -rf '{copy_arg}' && cp -a '{}' '{copy_arg}'", pod.display()))
        .status()
        .expect("cp");
    assert!(status.success());
    ctx.cmd()
        .arg("clean")
        .arg("--pod-dir")
        .arg(&copy)
        .assert()
        .success()
        .stderr(contains(format!("a copy of the pod {}", pod.display())));
    assert!(!copy.exists());
    // The original still answers on its socket, and can restart.
    let status = ctx.json(&["status", "--json"]);
    assert_eq!(status["running"], true, "{status}");
    assert_eq!(status["control"], true, "{status}");
    ctx.run_ok(&["restart", "stay"]);
    ctx.run_ok(&["stop"]);
}

#[test]
fn a_corrupt_registry_stops_up_with_its_name_and_is_left_as_it_was() {
    let ctx = TestContext::new();
    ctx.write("omnidev.toml", &format!("[ports]\nweb = 23000\n{ONCE}"));
    let registry = ctx.runtime_home().join("omnidev/pods.toml");
    std::fs::create_dir_all(registry.parent().expect("parent")).expect("mkdir");
    let corrupt = "pods = [\"/home/someone/.cache/omnidev/app-1\"\n";
    std::fs::write(&registry, corrupt).expect("write");
    ctx.assert(&["up", "--headless"]).code(1).stderr(contains(registry.display().to_string()));
    assert_eq!(std::fs::read_to_string(&registry).expect("read"), corrupt);
}

#[test]
fn a_cache_root_that_cannot_be_read_is_an_error_not_a_stopped_pod() {
    let ctx = TestContext::new();
    ctx.write("omnidev.toml", ONCE);
    // A file where a directory of the cache root's path should be: every
    // look at the pod fails with "Not a directory" (root reads through a
    // mode 000 directory, so that is no test under CI's root).
    let blocked = ctx.root.join("blocked");
    std::fs::write(&blocked, "not a directory\n").expect("write");
    for args in [&["stop"][..], &["status"], &["status", "--json"], &["clean"]] {
        // 1: omnidev could not do what was asked; never 0 or 3 (not running).
        let assert = ctx.cmd().args(args).env("XDG_CACHE_HOME", &blocked).assert().code(1);
        // Said on stderr, or on stdout as the one JSON error record.
        let output = assert.get_output();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(text.contains(&blocked.display().to_string()), "{args:?}: {text}");
        assert!(
            !text.contains("not running") && !text.contains("does not exist"),
            "{args:?}: {text}"
        );
    }
}

/// The contents of `<pod>/logs/<name>`, empty when missing.
fn read_log(pod: &Path, name: &str) -> String {
    std::fs::read_to_string(pod.join("logs").join(name)).unwrap_or_default()
}

#[test]
fn the_detached_log_survives_the_next_detach_and_rotates_by_size() {
    let ctx = TestContext::new();
    ctx.write("omnidev.toml", &staying("first-run"));
    let _stop = ctx.stop_on_drop();
    ctx.run_ok(&["up", "--detach"]);
    ctx.run_ok(&["stop"]);
    let pod = ctx.pod_dir().expect("pod");
    assert!(read_log(&pod, "omnidev.log").contains("first-run"));
    // Over the service logs' 10 MiB at once: about 11 MiB of 1000-byte
    // lines, then it stays up.
    ctx.write(
        "omnidev.toml",
        "[services.loud]\ncommand = [\"sh\", \"-c\", \"echo second-run; head -c 11000000 /dev/zero | tr '\\\\000' x | fold -w 1000; while true; do sleep 0.2; done\"]\ngrace-ms = 2000\n",
    );
    ctx.run_ok(&["up", "--detach"]);
    let first: PathBuf = pod.join("logs/omnidev.log.1");
    let second = pod.join("logs/omnidev.log.2");
    // The first run's log is kept, one generation up; then the second
    // run's output rotates once past 10 MiB.
    wait_for("the second run's log to rotate", DEADLINE, || std::fs::metadata(&second).is_ok());
    assert!(std::fs::read_to_string(&second).expect("read").contains("first-run"));
    // Rotated before the line that would not fit: full to within a line,
    // never over.
    let rotated = std::fs::read_to_string(&first).expect("read");
    assert!(
        rotated.contains("second-run")
            && rotated.len() <= 10 << 20
            && rotated.len() > (10 << 20) - 1_100,
        "{}",
        rotated.len()
    );
    ctx.run_ok(&["stop"]);
    let current = read_log(&pod, "omnidev.log");
    assert!(current.len() < 10 << 20, "{}", current.len());
    assert!(!current.contains("first-run"));
}

#[test]
fn a_checkout_with_a_very_long_name_gets_a_pod() {
    let ctx = TestContext::new();
    let repo = ctx.root.join("r".repeat(250));
    std::fs::create_dir_all(repo.join(".git")).expect("mkdir");
    std::fs::write(repo.join("omnidev.toml"), ONCE).expect("write");
    ctx.cmd().current_dir(&repo).args(["up", "--headless"]).assert().success();
    let pod = ctx.pod_dir().expect("pod");
    let name = pod.file_name().expect("name").to_string_lossy().into_owned();
    assert!(name.starts_with(&"r".repeat(64)) && name.len() == 64 + 9, "{name}");
    assert!(pod.join("logs/ok.log").is_file());
}

/// A checkout `name` beside the context's, with `profile`.
fn checkout(ctx: &TestContext, name: &str, profile: &str) -> PathBuf {
    let repo = ctx.root.join(name);
    std::fs::create_dir_all(repo.join(".git")).expect("mkdir");
    std::fs::write(repo.join("omnidev.toml"), profile).expect("write");
    repo
}

fn registry(ctx: &TestContext) -> String {
    std::fs::read_to_string(ctx.runtime_home().join("omnidev/pods.toml")).expect("registry")
}

#[test]
fn gc_removes_exactly_the_stopped_pods_of_deleted_checkouts_and_frees_their_ports() {
    let ctx = TestContext::new();
    let with_port = |word: &str| format!("[ports]\nweb = 23400\n{}", staying(word));
    let gone = checkout(&ctx, "gone", &format!("[ports]\nweb = 23400\n{ONCE}"));
    let kept = checkout(&ctx, "kept", &format!("[ports]\nweb = 23400\n{ONCE}"));
    let running = checkout(&ctx, "running", &with_port("up"));
    let repo_arg = |repo: &Path| repo.to_str().expect("utf-8").to_owned();
    for repo in [&gone, &kept] {
        ctx.run_ok(&["up", "--headless", "--repo", &repo_arg(repo)]);
    }
    ctx.run_ok(&["up", "--detach", "--repo", &repo_arg(&running)]);
    let pods: Vec<PathBuf> = std::fs::read_dir(ctx.cache_root())
        .expect("cache")
        .map(|e| e.expect("entry").path())
        .collect();
    let pod_of = |name: &str| {
        pods.iter()
            .find(|p| {
                p.file_name().is_some_and(|n| n.to_string_lossy().starts_with(&format!("{name}-")))
            })
            .cloned()
            .unwrap_or_else(|| panic!("no pod for {name} in {pods:?}"))
    };
    let (gone_pod, kept_pod, running_pod) = (pod_of("gone"), pod_of("kept"), pod_of("running"));
    let _stop = ctx.stop_on_drop_with(["--pod-dir".to_owned(), repo_arg(&running_pod)]);
    // A directory of the user's in the cache root, whose "checkout" is gone
    // too: not a pod, never touched.
    let foreign = ctx.cache_root().join("notes");
    std::fs::create_dir_all(&foreign).expect("mkdir");
    std::fs::write(foreign.join("pod.toml"), "repo = \"/nowhere\"\nnot = \"ours\"\n")
        .expect("write");
    std::fs::remove_dir_all(&gone).expect("delete a checkout");
    std::fs::remove_dir_all(&running).expect("delete a running pod's checkout");
    assert!(registry(&ctx).contains(&gone_pod.display().to_string()));

    // `ls` points at gc.
    let text = ctx.run_ok(&["ls"]);
    assert!(text.contains("omnidev gc"), "{text}");

    let nothing = ctx.root.join("nothing-skipped");
    let before = listing(&ctx.cache_root(), &nothing);
    let registry_before = registry(&ctx);
    let text = ctx.run_ok(&["gc", "--dry-run"]);
    assert!(text.contains(&format!("would remove {}", gone_pod.display())), "{text}");
    assert_eq!(listing(&ctx.cache_root(), &nothing), before, "--dry-run changed nothing");
    assert_eq!(registry(&ctx), registry_before);

    let text = ctx.run_ok(&["gc"]);
    assert!(text.contains(&format!("removed  {}", gone_pod.display())), "{text}");
    assert!(text.contains(&format!("omnidev stop --pod-dir {}", running_pod.display())), "{text}");
    assert!(text.contains(&format!("kept     {}: its checkout", kept_pod.display())), "{text}");
    assert!(!gone_pod.exists());
    assert!(kept_pod.join("pod.toml").is_file() && running_pod.join("pod.toml").is_file());
    assert_eq!(
        std::fs::read_to_string(foreign.join("pod.toml")).expect("foreign kept"),
        "repo = \"/nowhere\"\nnot = \"ours\"\n"
    );
    // Its ports are freed in the registry; the others keep theirs.
    let after = registry(&ctx);
    assert!(!after.contains(&gone_pod.display().to_string()), "{after}");
    assert!(after.contains(&kept_pod.display().to_string()), "{after}");
    assert!(after.contains(&running_pod.display().to_string()), "{after}");
    // The running pod still runs and answers.
    let status =
        ctx.run_ok(&["status", "--json", "--pod-dir", running_pod.to_str().expect("utf-8")]);
    assert!(status.contains("\"control\": true"), "{status}");
    ctx.run_ok(&["stop", "--pod-dir", running_pod.to_str().expect("utf-8")]);
    let text = ctx.run_ok(&["gc"]);
    assert!(text.contains(&format!("removed  {}", running_pod.display())), "{text}");
    assert!(!running_pod.exists());
}

#[test]
fn a_state_file_that_cannot_be_read_is_said_by_status_not_taken_for_no_services() {
    let ctx = TestContext::new();
    ctx.write("omnidev.toml", ONCE);
    ctx.run_ok(&["up", "--headless"]);
    let pod = ctx.pod_dir().expect("pod");
    let elsewhere = ctx.root.join("elsewhere.json");
    std::fs::rename(pod.join("state.json"), &elsewhere).expect("move");
    std::os::unix::fs::symlink(&elsewhere, pod.join("state.json")).expect("symlink");
    // 3: the pod does not run; the report comes first.
    let output = ctx.assert(&["status", "--json"]).code(3);
    let status: serde_json::Value =
        serde_json::from_slice(&output.get_output().stdout).expect("json");
    let error = status["error"].as_str().unwrap_or_default();
    assert!(
        error.contains(&pod.join("state.json").display().to_string())
            && error.contains("symbolic link"),
        "{status}"
    );
}

/// Two `gc` at once over the stopped pods of deleted checkouts: every pod
/// is removed, by one of them, and each tells the truth about a pod the
/// other took (another `gc` removing it, or gone by then): none says a
/// pod runs, and both exit 0.
#[test]
fn two_gc_at_once_both_tell_the_truth() {
    const PODS: usize = 12;
    let ctx = TestContext::new();
    let mut repos = Vec::new();
    for i in 0..PODS {
        let repo = checkout(&ctx, &format!("gone{i}"), ONCE);
        let arg = repo.to_str().expect("utf-8").to_owned();
        ctx.run_ok(&["exec", "--repo", &arg, "--", "true"]);
        repos.push(repo);
    }
    let pods: Vec<PathBuf> = std::fs::read_dir(ctx.cache_root())
        .expect("cache")
        .map(|e| e.expect("entry").path())
        .collect();
    assert_eq!(pods.len(), PODS, "{pods:?}");
    for repo in &repos {
        std::fs::remove_dir_all(repo).expect("delete a checkout");
    }
    let racers = [ctx.spawn(&["gc"]), ctx.spawn(&["gc"])];
    let texts = racers.map(|racer| {
        let output = racer.wait_with_output().expect("wait");
        assert!(output.status.success(), "{}", ctx.render(&output));
        String::from_utf8_lossy(&output.stdout).into_owned()
    });
    for pod in &pods {
        assert!(!pod.exists(), "{} is left: {texts:#?}", pod.display());
        let removed = format!("removed  {} ", pod.display());
        let by = texts.iter().filter(|t| t.contains(&removed)).count();
        assert_eq!(by, 1, "{} removed by {by}: {texts:#?}", pod.display());
    }
    for text in &texts {
        for line in text.lines() {
            assert!(
                line.starts_with("removed  ")
                    || line.ends_with(": it no longer exists")
                    || line.ends_with(": no pod is left in it")
                    || line.contains(": another `omnidev gc` (pid "),
                "{line}\n{text}"
            );
        }
    }
}
