//! Property test of the path layer (`omnidev_core::fs::Dir`): whatever
//! relative path is handed to it and whatever it is asked to do with it,
//! nothing outside the directory it was opened on is created, changed or
//! removed — even with symbolic links to the outside planted inside.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use omnidev_core::fs::{Dir, OpenOptions, components};
use proptest::prelude::*;

/// Every file under `root` (links not followed) with its bytes or link
/// target: the outside world, compared before and after.
fn snapshot(root: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read_dir") {
            let path = entry.expect("entry").path();
            let meta = std::fs::symlink_metadata(&path).expect("meta");
            let value = if meta.file_type().is_symlink() {
                let mut v = b"-> ".to_vec();
                v.extend(std::fs::read_link(&path).expect("link").as_os_str().as_encoded_bytes());
                v
            } else if meta.is_dir() {
                stack.push(path.clone());
                b"dir".to_vec()
            } else {
                std::fs::read(&path).expect("read")
            };
            out.insert(path, value);
        }
    }
    out
}

fn part() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec!["a", "b", "..", ".", "", "out", "file", "/", "logs", "state.json"])
}

fn path() -> impl Strategy<Value = String> {
    prop::collection::vec(part(), 0..6).prop_map(|parts| parts.join("/"))
}

#[derive(Debug, Clone)]
enum Op {
    Write(String),
    Append(String),
    Mkdir(String),
    Remove(String),
    Rename(String, String),
    Link(String),
    Read(String),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        path().prop_map(Op::Write),
        path().prop_map(Op::Append),
        path().prop_map(Op::Mkdir),
        path().prop_map(Op::Remove),
        (path(), path()).prop_map(|(a, b)| Op::Rename(a, b)),
        path().prop_map(Op::Link),
        path().prop_map(Op::Read),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn no_path_escapes_the_directory(ops in prop::collection::vec(op(), 1..8)) {
        let tmp = tempfile::tempdir().expect("tempdir");
        let outside = tmp.path().join("outside");
        std::fs::create_dir_all(outside.join("sub")).expect("mkdir");
        std::fs::write(outside.join("file"), "precious").expect("write");
        std::fs::write(outside.join("state.json"), "theirs").expect("write");
        let inside = tmp.path().join("pod");
        std::fs::create_dir_all(inside.join("a/b")).expect("mkdir");
        std::fs::write(inside.join("a/file"), "ours").expect("write");
        // Links to the outside, where a careless or hostile hand may put them.
        std::os::unix::fs::symlink(&outside, inside.join("out")).expect("symlink");
        std::os::unix::fs::symlink(&outside, inside.join("logs")).expect("symlink");
        std::os::unix::fs::symlink(outside.join("file"), inside.join("a/b/file")).expect("symlink");
        std::os::unix::fs::symlink(outside.join("state.json"), inside.join("state.json"))
            .expect("symlink");
        let before = snapshot(&outside);
        let dir = Dir::open(&inside).expect("open");
        for op in &ops {
            let (Op::Write(p) | Op::Append(p) | Op::Mkdir(p) | Op::Remove(p) | Op::Link(p)
                | Op::Read(p) | Op::Rename(p, _)) = op;
            let accepted = components(Path::new(p)).is_ok();
            let result = match op {
                Op::Write(p) => dir.write_atomic(Path::new(p), b"x"),
                Op::Append(p) => dir
                    .open_file(Path::new(p), OpenOptions::AppendCreate)
                    .and_then(|mut f| std::io::Write::write_all(&mut f, b"x")),
                Op::Mkdir(p) => dir.create_dir_all(Path::new(p), 0o700).map(drop),
                Op::Remove(p) => dir.remove_tree(Path::new(p)).map(drop),
                Op::Rename(a, b) => dir.rename(Path::new(a), Path::new(b)),
                Op::Link(p) => dir.symlink(&outside.join("file"), Path::new(p)),
                Op::Read(p) => dir.read(Path::new(p), 1 << 20).map(drop),
            };
            // What the path check refuses is never done.
            if !accepted {
                prop_assert!(result.is_err(), "{op:?} was done");
            }
        }
        prop_assert_eq!(snapshot(&outside), before);
        let names: Vec<_> = std::fs::read_dir(tmp.path())
            .expect("read_dir")
            .map(|e| e.expect("entry").file_name())
            .collect();
        prop_assert_eq!(names.len(), 2, "{:?}", names);
    }
}
