//! The one door for files, kept: product code opens, reads and writes
//! files through `omnidev_core::fs` (no link followed where omnidev owns
//! the path, never blocking on a FIFO or device, regular files only,
//! bounded), and nowhere else calls `std::fs` to open one. Run by `cargo
//! test -p xtask`, which CI runs.

use std::path::{Path, PathBuf};

/// What opens a file without the door.
const RAW: &[&str] = &[
    "File::open(",
    "File::create(",
    "OpenOptions::new(",
    "fs::read(",
    "fs::read_to_string(",
    "fs::write(",
];

/// Where raw opens belong: the door itself, and the kernel's own files
/// (`/proc`, `/sys/fs/cgroup`, `/dev/null` for a child), which are no
/// one's to plant.
const DOOR_AND_KERNEL: &[&str] = &[
    "omnidev-core/src/fs.rs",
    "omnidev-core/src/fs/",
    "omnidev-core/src/platform/",
    "omnidev-core/src/containment/cgroup.rs",
    "omnidev-core/src/process.rs",
    "omnidev-core/src/process/",
];

/// The few opens elsewhere, each with why the door is not for it.
const EXCEPTIONS: &[(&str, &str, &str)] = &[
    (
        "omnidev-cli/src/commands/install.rs",
        "OpenOptions::new(",
        "the controlling terminal, /dev/tty, for the prompt",
    ),
    (
        "omnidev-cli/src/detach.rs",
        "File::open(pod.dir())",
        "the pod directory itself, opened only to lock it",
    ),
    (
        "omnidev-pod/src/init.rs",
        "OpenOptions::new(",
        "a new omnidev.toml in the user's checkout, created exclusively \
         (O_EXCL refuses a link) with the user's umask",
    ),
];

/// The product sources, as the stop hook counts them: the four crates'
/// `src`, without `tests.rs`, `tests/`, `bin/` and what follows a
/// file's first `#[cfg(test)]`.
fn product_files(root: &Path) -> Vec<(String, String)> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("a source directory") {
            let path = entry.expect("an entry").path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if path.is_dir() {
                if name != "tests" && name != "bin" {
                    walk(&path, out);
                }
            } else if path.extension().is_some_and(|e| e == "rs") && name != "tests.rs" {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    for krate in ["omnidev-core", "omnidev-pod", "omnidev-install", "omnidev-cli"] {
        walk(&root.join(krate).join("src"), &mut files);
    }
    files
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).expect("a source file");
            let product = text.split("\n#[cfg(test)]").next().unwrap_or("").to_owned();
            let relative = path.strip_prefix(root).expect("under the root");
            (relative.to_string_lossy().into_owned(), product)
        })
        .collect()
}

/// Each raw open in `files` outside the door, the kernel's files and the
/// exceptions: `file:line: text`.
fn raw_opens(files: &[(String, String)]) -> Vec<String> {
    let mut found = Vec::new();
    for (file, text) in files {
        if DOOR_AND_KERNEL.iter().any(|p| file.starts_with(p)) {
            continue;
        }
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            let raw = RAW.iter().any(|needle| {
                code.match_indices(needle).any(|(at, _)| {
                    // `LogFile::open(` is not `File::open(`.
                    !code[..at].chars().next_back().is_some_and(|c| c.is_alphanumeric() || c == '_')
                })
            });
            let excused =
                EXCEPTIONS.iter().any(|(f, needle, _)| f == file && code.contains(needle));
            if raw && !excused {
                found.push(format!("{file}:{}: {}", n + 1, line.trim()));
            }
        }
    }
    found
}

#[test]
fn every_file_goes_through_the_one_door() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let files = product_files(&root);
    assert!(files.len() > 50, "the sources were read");
    let found = raw_opens(&files);
    assert!(
        found.is_empty(),
        "files opened outside omnidev_core::fs (open them through fs::Dir, \
         fs::read_file, fs::read_linked or fs::open_lock; or add an exception with \
         its reason):\n{}",
        found.join("\n")
    );
    // Each exception still stands where it says.
    for (file, needle, why) in EXCEPTIONS {
        let text = &files.iter().find(|(f, _)| f == file).expect(file).1;
        assert!(text.contains(needle), "{file} no longer has {needle} ({why})");
    }
}

#[test]
fn a_raw_open_is_found_and_a_lookalike_is_not() {
    let files = vec![
        (
            "omnidev-pod/src/x.rs".to_owned(),
            "let a = std::fs::read_to_string(p);\nLogFile::open(p);\n// File::open(q)\n".to_owned(),
        ),
        (
            "omnidev-core/src/platform/linux.rs".to_owned(),
            "std::fs::read(\"/proc/1/stat\")".to_owned(),
        ),
    ];
    assert_eq!(raw_opens(&files), ["omnidev-pod/src/x.rs:1: let a = std::fs::read_to_string(p);"]);
}
