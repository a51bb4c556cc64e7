//! Checkout discovery, pod directories and config seeding on real files.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use omnidev_pod::seed::SeedOutcome;
use omnidev_pod::{Error, Pod, Profile, RenderContext, find_repo_root, resolve_repo_root};
use omnidev_test_support::git;

#[test]
fn root_from_nested_dir_and_from_a_real_git_worktree() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let main = tmp.path().join("main");
    std::fs::create_dir_all(main.join("omnigent/sub")).expect("mkdir");
    std::fs::create_dir_all(main.join("web")).expect("mkdir");
    std::fs::write(main.join("omnigent/sub/x.py"), "").expect("write");
    std::fs::write(main.join("web/package.json"), "{}").expect("write");
    git(&main, &["init", "-q"]);
    git(&main, &["add", "."]);
    git(&main, &["commit", "-q", "-m", "init"]);
    let canonical_main = main.canonicalize().expect("canon");
    assert_eq!(find_repo_root(&main.join("omnigent/sub")).expect("root"), canonical_main);

    let worktree = tmp.path().join("wt");
    git(&main, &["worktree", "add", "-q", worktree.to_str().expect("utf8")]);
    assert!(worktree.join(".git").is_file(), "a worktree has a .git file");
    let root = find_repo_root(&worktree.join("omnigent/sub")).expect("worktree root");
    assert_eq!(root, worktree.canonicalize().expect("canon"));
    Profile::omnigent().check_repo(&root).expect("worktree has the Omnigent shape");
}

#[test]
fn explicit_repo_is_taken_as_given_and_a_wrong_shape_is_explained() {
    let tmp = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(tmp.path().join(".git")).expect("mkdir");
    let nested = tmp.path().join("examples/omnigent-example");
    std::fs::create_dir_all(&nested).expect("mkdir");

    let root = resolve_repo_root(tmp.path(), Some(Path::new("examples/omnigent-example")))
        .expect("explicit");
    assert_eq!(root, nested.canonicalize().expect("canon"));
    assert_eq!(
        resolve_repo_root(&nested, None).expect("walk"),
        tmp.path().canonicalize().expect("canon")
    );

    let err = Profile::omnigent().check_repo(&root).expect_err("no omnigent/ web/");
    let text = err.to_string();
    let help = miette::Diagnostic::help(&err).map(|h| h.to_string()).unwrap_or_default();
    assert!(matches!(err, Error::RepoShape { .. }));
    assert!(text.contains("omnigent") && text.contains("web"), "{text}");
    assert!(text.contains(&root.display().to_string()), "{text}");
    assert!(help.contains("--repo") && help.contains("omnidev.toml"), "{help}");

    let err = resolve_repo_root(tmp.path(), Some(Path::new("missing"))).expect_err("missing");
    assert!(err.to_string().contains("missing"), "{err}");
}

#[test]
fn no_repository_is_a_clear_error() {
    let tmp = tempfile::tempdir().expect("tempdir");
    // /tmp itself is normally not inside a repository; if it is, skip nothing
    // but check the walk found a real marker.
    match find_repo_root(tmp.path()) {
        Err(Error::RepoNotFound { start }) => {
            assert_eq!(start, tmp.path().canonicalize().expect("canon"));
        }
        Ok(root) => assert!(root.join(".git").exists() || root.join(".jj").exists()),
        Err(other) => panic!("unexpected {other}"),
    }
}

#[test]
fn pod_dirs_stable_distinct_private_and_overridable() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cache = omnidev_pod::pod::cache_root_from(Some(tmp.path().as_os_str().into()), None)
        .expect("cache root");
    let a = omnidev_pod::pod::default_pod_dir(&cache, Path::new("/src/one/omnigent"));
    assert_eq!(a, omnidev_pod::pod::default_pod_dir(&cache, Path::new("/src/one/omnigent")));
    let b = omnidev_pod::pod::default_pod_dir(&cache, Path::new("/src/two/omnigent"));
    assert_ne!(a, b);

    let dirs = Profile::omnigent().pod.dirs;
    let pod = Pod::create(&a, &dirs).expect("create");
    assert_eq!(std::fs::metadata(pod.dir()).expect("meta").permissions().mode() & 0o777, 0o700);
    for sub in ["data/omnigent", "artifacts", "config", "logs"] {
        assert!(pod.dir().join(sub).is_dir(), "{sub}");
    }

    let custom = tmp.path().join("custom-pod");
    let pod = Pod::create(&custom, &dirs).expect("override");
    assert_eq!(pod.dir(), custom);
    assert_eq!(pod.state_file(), custom.join("state.json"));
}

fn seed_context(tmp: &Path, env: &[(&str, &Path)]) -> RenderContext {
    let mut ctx =
        RenderContext { repo: tmp.join("repo"), pod_dir: tmp.join("pod"), ..Default::default() };
    for (k, v) in env {
        ctx.inherited_env.insert((*k).to_owned(), v.display().to_string());
    }
    ctx
}

#[test]
fn seeding_copies_when_absent_never_overwrites_and_honours_config_home() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = tmp.path().join("home");
    std::fs::create_dir_all(home.join(".omnigent")).expect("mkdir");
    std::fs::write(home.join(".omnigent/config.yaml"), "from: home\n").expect("write");
    let config_home = tmp.path().join("xdg-omnigent");
    std::fs::create_dir_all(&config_home).expect("mkdir");
    std::fs::write(config_home.join("config.yaml"), "from: config-home\n").expect("write");
    let profile = Profile::omnigent();
    let dest = tmp.path().join("pod/config/config.yaml");

    // OMNIGENT_CONFIG_HOME set: it wins over ~/.omnigent.
    let ctx = seed_context(tmp.path(), &[("HOME", &home), ("OMNIGENT_CONFIG_HOME", &config_home)]);
    let outcomes = profile.seed(&ctx);
    assert!(matches!(outcomes.as_slice(), [SeedOutcome::Copied { .. }]), "{outcomes:?}");
    assert_eq!(std::fs::read_to_string(&dest).expect("read"), "from: config-home\n");

    // Never overwritten, even when the source changes.
    std::fs::write(&dest, "edited in the pod\n").expect("write");
    let outcomes = profile.seed(&ctx);
    assert!(matches!(outcomes.as_slice(), [SeedOutcome::Kept { .. }]), "{outcomes:?}");
    assert_eq!(std::fs::read_to_string(&dest).expect("read"), "edited in the pod\n");

    // Without OMNIGENT_CONFIG_HOME: ~/.omnigent/config.yaml.
    std::fs::remove_file(&dest).expect("rm");
    let ctx = seed_context(tmp.path(), &[("HOME", &home)]);
    profile.seed(&ctx);
    assert_eq!(std::fs::read_to_string(&dest).expect("read"), "from: home\n");

    // No source at all: nothing happens, and it is not an error.
    std::fs::remove_file(&dest).expect("rm");
    let ctx = seed_context(tmp.path(), &[("HOME", &tmp.path().join("nobody"))]);
    assert!(matches!(profile.seed(&ctx).as_slice(), [SeedOutcome::NoSource { .. }]));
    assert!(!dest.exists());
}

#[test]
fn a_failed_copy_is_a_warning_not_an_error() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = tmp.path().join("config.yaml");
    std::fs::write(&src, "x").expect("write");
    // The destination's parent is a file: the copy cannot succeed.
    std::fs::write(tmp.path().join("blocker"), "").expect("write");
    let outcome = omnidev_pod::seed::seed_file(&[src], &tmp.path().join("blocker/config.yaml"));
    assert!(matches!(outcome, SeedOutcome::Failed { .. }), "{outcome:?}");
}
