//! What omnidev writes stays inside the pod: hostile names and paths in a
//! repository's `omnidev.toml` are refused when the profile loads, a
//! symbolic link planted in the pod is never followed for writing, and
//! nothing outside the pod is created or changed (the whole temp tree is
//! listed before and after).

#[path = "support/context.rs"]
mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::Duration;

use support::{TestContext, listing};

/// A checkout with `profile` as its `omnidev.toml`, a seed source, a
/// scratch directory `outside/` beside the pod, and the pod directory
/// nested deep enough that `../../../x` from it stays in the temp tree.
struct Case {
    ctx: TestContext,
    pod: PathBuf,
    outside: PathBuf,
}

impl Case {
    fn new(profile: &str) -> Self {
        let ctx = TestContext::new();
        ctx.write("omnidev.toml", profile);
        ctx.write("seed-source.yaml", "seeded: true\n");
        let outside = ctx.root.join("outside");
        std::fs::create_dir_all(&outside).expect("mkdir");
        std::fs::write(outside.join("keep.txt"), "mine\n").expect("write");
        std::fs::set_permissions(&outside, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let pod = ctx.root.join("pods/a/b/pod");
        Self { ctx, pod, outside }
    }

    /// `omnidev up --headless --pod-dir POD` to its end. Spawned and
    /// polled, not through `assert_cmd`: a hang fails the test as a hang
    /// ("did not end"), not as the exit code of a process killed at a
    /// timeout.
    fn up(&self) -> std::process::Output {
        let mut child = self
            .ctx
            .command()
            .args(["up", "--headless", "--pod-dir"])
            .arg(&self.pod)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn");
        let start = std::time::Instant::now();
        while child.try_wait().expect("wait").is_none() {
            assert!(start.elapsed() < Duration::from_secs(60), "omnidev up did not end");
            std::thread::sleep(Duration::from_millis(50));
        }
        child.wait_with_output().expect("output")
    }

    /// Runs `omnidev up` and asserts it fails with every one of `expected`
    /// in its error, leaving everything outside the pod as it was.
    fn refused(&self, expected: &[&str]) {
        let before = listing(&self.ctx.root, &self.pod);
        let output = self.up();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "accepted: {stderr}");
        for text in expected {
            assert!(stderr.contains(text), "missing {text:?} in: {stderr}");
        }
        let after = listing(&self.ctx.root, &self.pod);
        assert_eq!(before, after, "something outside the pod changed: {stderr}");
    }
}

const SERVICE: &str = "[services.ok]\ncommand = [\"true\"]\nrestart = \"never\"\n";

#[test]
fn a_service_name_that_is_a_path_is_refused_at_load() {
    let case = Case::new("[services.\"../../../x\"]\ncommand = [\"true\"]\n");
    case.refused(&["omnidev.toml:1:11:", "invalid service name \"../../../x\"", "a-z"]);
    assert!(!case.pod.exists(), "no pod is made for a refused profile");
}

#[test]
fn a_port_name_that_is_a_path_is_refused_at_load() {
    let case = Case::new(&format!("[ports]\n\"../p\" = 7000\n\n{SERVICE}"));
    case.refused(&["omnidev.toml:2:1:", "invalid port name \"../p\""]);
}

#[test]
fn pod_dirs_that_leave_the_pod_are_refused_at_load() {
    for (value, reason) in [
        ("../../../d", "leads out"),
        ("/abs/path", "absolute"),
        ("a/../../b", "leads out"),
        ("", "empty"),
    ] {
        let case = Case::new(&format!("[pod]\ndirs = [\"logs\", \"{value}\"]\n\n{SERVICE}"));
        case.refused(&["omnidev.toml:2:17:", &format!("`pod.dirs` = \"{value}\""), reason]);
    }
}

#[test]
fn seed_destinations_that_leave_the_pod_are_refused_at_load() {
    for (value, reason) in [
        ("../../../f.txt", "leads out"),
        ("/abs/path", "absolute"),
        ("a/../../b", "leads out"),
        (".", "pod directory itself"),
    ] {
        let case = Case::new(&format!(
            "{SERVICE}\n[[seed]]\nfrom = [\"{{repo}}/seed-source.yaml\"]\nto = \"ok.yaml\"\n\n\
             [[seed]]\nfrom = [\"{{repo}}/seed-source.yaml\"]\nto = \"{value}\"\n"
        ));
        case.refused(&["omnidev.toml:11:1:", &format!("`seed.to` = \"{value}\""), reason]);
    }
}

#[test]
fn a_service_cwd_outside_the_checkout_needs_the_opt_in() {
    for value in ["..", "/tmp", "web/../../x"] {
        let case = Case::new(&format!("[services.out]\ncommand = [\"true\"]\ncwd = \"{value}\"\n"));
        case.refused(&[
            "omnidev.toml:3:1:",
            &format!("`cwd` = \"{value}\""),
            "cwd-outside-repo = true",
        ]);
    }
    // With the opt-in the service runs in that directory.
    let case = Case::new(
        "[services.out]\ncommand = [\"sh\", \"-c\", \"pwd\"]\ncwd = \"..\"\n\
         cwd-outside-repo = true\nrestart = \"never\"\n",
    );
    let output = case.up();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{output:?}");
    let root = case.ctx.root.display().to_string();
    assert!(
        stdout.lines().any(|line| line.starts_with("out ") && line.ends_with(&format!("| {root}"))),
        "{stdout}"
    );
}

#[test]
fn a_symlink_planted_in_the_pod_is_not_followed() {
    // The profile is valid; the pod was tampered with: each of its
    // directories, and a log file, points at the scratch directory.
    let profile = format!(
        "[pod]\ndirs = [\"data/sub\"]\n\n{SERVICE}\n\
         [[seed]]\nfrom = [\"{{repo}}/seed-source.yaml\"]\nto = \"config/config.yaml\"\n"
    );
    for planted in ["data", "logs", "config"] {
        let case = Case::new(&profile);
        let first = case.up();
        assert!(first.status.success(), "{first:?}");
        let target = case.pod.join(planted);
        if target.exists() {
            std::fs::remove_dir_all(&target).expect("rm");
        }
        std::os::unix::fs::symlink(&case.outside, &target).expect("symlink");
        let before = listing(&case.ctx.root, &case.pod);
        let output = case.up();
        let stderr = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        let after = listing(&case.ctx.root, &case.pod);
        assert_eq!(before, after, "{planted}: outside changed: {stderr}");
        if planted == "config" {
            // A seed is a convenience: it is skipped with a warning, and
            // the pod runs.
            assert!(stderr.contains("symbolic link"), "{planted}: {stderr}");
        } else {
            assert!(!output.status.success(), "{planted}: accepted: {stderr}");
            assert!(
                stderr.contains(&format!("refusing to write {}", case.pod.join(planted).display()))
                    && stderr.contains("symbolic link"),
                "{planted}: {stderr}"
            );
        }
    }
}

#[test]
fn a_symlinked_log_file_is_not_followed() {
    let case = Case::new(&SERVICE.replace("true", "echo"));
    let first = case.up();
    assert!(first.status.success(), "{first:?}");
    let log = case.pod.join("logs/ok.log");
    std::fs::remove_file(&log).expect("rm");
    std::os::unix::fs::symlink(case.outside.join("keep.txt"), &log).expect("symlink");
    let before = listing(&case.ctx.root, &case.pod);
    let output = case.up();
    let after = listing(&case.ctx.root, &case.pod);
    assert_eq!(before, after, "{output:?}");
}
