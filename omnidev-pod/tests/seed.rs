//! Config seeding when the copy fails half-way (a real write error in a
//! helper process whose file size is limited).

use std::process::Command;

#[test]
fn a_failed_copy_leaves_no_partial_file_behind() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let from = tmp.path().join("config.yaml");
    std::fs::write(&from, "model: a-long-enough-value\n").expect("write source");
    let to = tmp.path().join("pod/config/config.yaml");
    let out = Command::new(env!("CARGO_BIN_EXE_omnidev-pod-test-helper"))
        .arg("seed-limited")
        .arg(&from)
        .arg(&to)
        .output()
        .expect("run helper");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout} {}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.starts_with("Failed"), "{stdout}");
    // A torn copy would be kept as the pod-local config on every later start.
    assert!(!to.exists(), "partial copy left at {}", to.display());
    let outcome = omnidev_pod::seed::seed_file(std::slice::from_ref(&from), &to);
    assert!(matches!(outcome, omnidev_pod::seed::SeedOutcome::Copied { .. }), "{outcome:?}");
    assert_eq!(std::fs::read_to_string(&to).expect("read copy"), "model: a-long-enough-value\n");
}
