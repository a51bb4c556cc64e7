//! Hostile input and faults, through the real binary: directories that are
//! not pods, closed output pipes.

#[path = "support/context.rs"]
mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use support::{TestContext, listing};

const PROFILE: &str = "[services.ok]\ncommand = [\"echo\", \"hello\"]\nrestart = \"never\"\n";

/// A directory of the user's with a file, a sub-directory and mode 0755.
fn users_directory(ctx: &TestContext) -> std::path::PathBuf {
    let dir = ctx.root.join("work");
    std::fs::create_dir_all(dir.join("src")).expect("mkdir");
    std::fs::write(dir.join("thesis.tex"), "\\begin{document}\n").expect("write");
    std::fs::write(dir.join("src/main.c"), "int main;\n").expect("write");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    dir
}

fn assert_refused(output: &std::process::Output, dir: &Path) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "{} is not an omnidev pod directory",
            dir.display()
        )),
        "{stderr}"
    );
}

#[test]
fn a_directory_that_is_not_a_pod_survives_byte_for_byte() {
    let ctx = TestContext::new();
    ctx.write("omnidev.toml", PROFILE);
    let dir = users_directory(&ctx);
    let nothing = ctx.root.join("nothing-skipped");
    let before = listing(&ctx.root, &nothing);
    for args in [
        &["up", "--headless", "--clean", "--pod-dir"][..],
        &["up", "--headless", "--pod-dir"],
        &["up", "--detach", "--clean", "--pod-dir"],
        &["clean", "--pod-dir"],
    ] {
        let output = ctx.command().args(args).arg(&dir).output().expect("run");
        assert_refused(&output, &dir);
        let after = listing(&ctx.root, &nothing);
        let changed: Vec<_> = after
            .iter()
            .filter(|(p, v)| before.get(*p) != Some(v))
            .collect();
        // The cache root may appear (the ports lock lives there); nothing
        // else.
        assert!(
            changed
                .iter()
                .all(|(p, _)| p.starts_with(ctx.home.join(".cache-xdg"))),
            "{args:?} changed {changed:?}"
        );
        assert!(before.keys().all(|p| after.contains_key(p)), "{args:?}");
    }
    let mode = std::fs::metadata(&dir).expect("meta").permissions().mode() & 0o777;
    assert_eq!(mode, 0o755);
}

#[test]
fn an_empty_directory_and_an_old_pod_are_accepted_and_clean_removes_a_pod() {
    let ctx = TestContext::new();
    ctx.write("omnidev.toml", PROFILE);
    let empty = ctx.root.join("empty");
    std::fs::create_dir(&empty).expect("mkdir");
    let output = ctx
        .command()
        .args(["up", "--headless", "--pod-dir"])
        .arg(&empty)
        .output()
        .expect("run");
    assert!(output.status.success(), "{output:?}");
    assert!(empty.join(".omnidev-pod").is_file());
    // A pod from before the marker: the layout is enough.
    std::fs::remove_file(empty.join(".omnidev-pod")).expect("rm");
    let output = ctx
        .command()
        .args(["up", "--headless", "--clean", "--pod-dir"])
        .arg(&empty)
        .output()
        .expect("run");
    assert!(output.status.success(), "{output:?}");
    let output = ctx
        .command()
        .args(["clean", "--pod-dir"])
        .arg(&empty)
        .output()
        .expect("run");
    assert!(output.status.success(), "{output:?}");
    assert!(!empty.exists());
}
