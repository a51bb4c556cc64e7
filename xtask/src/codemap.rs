//! The code map of `docs/architecture.md` against the tree: every path it
//! names exists, every crate of the workspace is named, and every folder
//! of a crate's sources is named (itself, its module file, or a folder
//! above it); and no two types of the product crates share a name, private
//! ones too (each crate's `Error` and `Result`, named by their crate,
//! apart).
//! Checked as a test (`cargo test -p xtask codemap`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// What the map says differs from the tree, worded (empty: they agree).
pub fn mismatches(root: &Path, document: &str, crates: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    let Some(map) = section(document, "## Code map") else {
        return vec!["docs/architecture.md has no `## Code map`".to_owned()];
    };
    let mut named_crates = BTreeSet::new();
    // Per crate, the paths named, relative to its `src/`.
    let mut named: Vec<(String, BTreeSet<PathBuf>)> = Vec::new();
    for paragraph in map.split("\n- ").flat_map(|p| p.split("\n\n")) {
        for heading in crate_headings(paragraph) {
            named_crates.insert(heading.clone());
            named.push((heading, BTreeSet::new()));
        }
        let Some((krate, paths)) = named.last_mut() else {
            continue;
        };
        // A name resolves against the crate's sources, the crate, the
        // repository, or a folder named before it in the same entry.
        let mut folders = vec![PathBuf::new()];
        for token in code_spans(paragraph).filter(|t| is_path(t)) {
            let found = folders.iter().find_map(|folder| {
                let relative = folder.join(token);
                [
                    root.join(krate.as_str()).join("src").join(&relative),
                    root.join(krate.as_str()).join(&relative),
                    root.join(&relative),
                ]
                .into_iter()
                .any(|candidate| candidate.exists())
                .then_some(relative)
            });
            match found {
                Some(relative) => {
                    if token.ends_with('/') {
                        folders.push(relative.clone());
                    }
                    paths.insert(relative);
                }
                None => out.push(format!(
                    "the code map names `{token}` (under `{krate}`), which is not in the tree"
                )),
            }
        }
    }
    for krate in crates {
        if !named_crates.contains(*krate) {
            out.push(format!("the code map does not name the crate `{krate}`"));
        }
    }
    for (krate, paths) in &named {
        let src = root.join(krate).join("src");
        for folder in folders_below(&src) {
            let covered = folder.ancestors().any(|a| {
                !a.as_os_str().is_empty()
                    && (paths.contains(&a.join("")) || paths.contains(&a.with_extension("rs")))
            });
            if !covered {
                out.push(format!("the code map does not name `{krate}/src/{}/`", folder.display()));
            }
        }
    }
    out
}

/// The text of the section that begins with `heading`, up to the next one.
fn section<'d>(document: &'d str, heading: &str) -> Option<&'d str> {
    let start = document.find(&format!("\n{heading}\n"))? + heading.len() + 2;
    let rest = &document[start..];
    Some(rest.find("\n## ").map_or(rest, |end| &rest[..end]))
}

/// The crates a paragraph introduces: `` **`name`** ``.
fn crate_headings(paragraph: &str) -> Vec<String> {
    paragraph
        .split("**`")
        .skip(1)
        .filter_map(|part| part.split_once("`**").map(|(name, _)| name.to_owned()))
        .collect()
}

/// The `` `code` `` spans of `text`.
fn code_spans(text: &str) -> impl Iterator<Item = &str> {
    text.split('`').skip(1).step_by(2)
}

/// Whether a span names a file or folder of the tree (`a/`, `b.rs`).
fn is_path(token: &str) -> bool {
    (token.ends_with('/') || Path::new(token).extension().is_some_and(|e| e == "rs"))
        && token.chars().all(|c| c.is_ascii_alphanumeric() || "_-./".contains(c))
}

/// The names of types (`struct`, `enum`, `trait`, `type`, of any
/// visibility; a trait's or impl's associated `type` apart) declared in
/// more than one place of the `crates`' product sources (test modules and
/// files apart), each with its places; each crate's `Error` and `Result`
/// may repeat.
pub fn repeated_type_names(root: &Path, crates: &[&str]) -> Vec<String> {
    let mut places = std::collections::BTreeMap::<String, Vec<String>>::new();
    for krate in crates {
        let src = root.join(krate).join("src");
        let folders = std::iter::once(PathBuf::new()).chain(folders_below(&src));
        for folder in folders.filter(|f| !f.iter().any(|part| part == "tests" || part == "bin")) {
            let Ok(entries) = std::fs::read_dir(src.join(&folder)) else {
                continue;
            };
            for entry in entries.flatten() {
                let name = entry.file_name();
                let file = folder.join(&name);
                if file.extension().is_none_or(|e| e != "rs") || name == "tests.rs" {
                    continue;
                }
                let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
                let product = text.lines().take_while(|l| !l.starts_with("#[cfg(test)]"));
                for line in product {
                    let mut words = line.split_whitespace().peekable();
                    words.next_if(|w| w.starts_with("pub"));
                    let (Some(kind @ ("struct" | "enum" | "trait" | "type")), Some(ty)) =
                        (words.next(), words.next())
                    else {
                        continue;
                    };
                    // An associated type is indented in its trait or impl.
                    if kind == "type" && line.starts_with(' ') {
                        continue;
                    }
                    let ty: String = ty.chars().take_while(|c| c.is_alphanumeric()).collect();
                    if ty != "Error" && ty != "Result" {
                        let place = format!("{krate}/src/{}", file.display());
                        places.entry(ty).or_default().push(place);
                    }
                }
            }
        }
    }
    places
        .into_iter()
        .filter(|(_, at)| at.len() > 1)
        .map(|(ty, mut at)| {
            at.sort();
            format!("`{ty}` is declared in {}", at.join(", "))
        })
        .collect()
}

/// Every folder below `src` (relative to it), but the tests' snapshots.
fn folders_below(src: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(relative) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(src.join(&relative)) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            if !entry.file_type().is_ok_and(|t| t.is_dir()) || name == "snapshots" {
                continue;
            }
            let folder = relative.join(name);
            out.push(folder.clone());
            stack.push(folder);
        }
    }
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The workspace's members, from its manifest.
    fn members(root: &Path) -> Vec<String> {
        let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("Cargo.toml");
        let line = manifest.lines().find(|l| l.starts_with("members")).expect("members");
        code_like(line)
    }

    fn code_like(line: &str) -> Vec<String> {
        line.split('"').skip(1).step_by(2).map(str::to_owned).collect()
    }

    #[test]
    fn the_code_map_matches_the_tree() {
        let root = crate::util::workspace_root();
        let document =
            std::fs::read_to_string(root.join("docs/architecture.md")).expect("the document");
        let crates = members(&root);
        let crates: Vec<&str> = crates.iter().map(String::as_str).collect();
        assert_eq!(mismatches(&root, &document, &crates), Vec::<String>::new());
    }

    #[test]
    fn no_two_types_of_the_product_share_a_name() {
        let root = crate::util::workspace_root();
        let product = ["omnidev-core", "omnidev-pod", "omnidev-install", "omnidev-cli"];
        assert_eq!(repeated_type_names(&root, &product), Vec::<String>::new());
    }

    #[test]
    fn a_type_declared_twice_is_found() {
        let tree = tempfile::tempdir().expect("tempdir");
        for dir in ["a/src/inner", "a/src/tests", "b/src"] {
            std::fs::create_dir_all(tree.path().join(dir)).expect("mkdir");
        }
        let write = |path: &str, text: &str| {
            std::fs::write(tree.path().join(path), text).expect("write");
        };
        write("a/src/lib.rs", "pub struct Line;\npub enum Error {}\npub(crate) struct Kept;\n");
        write(
            "a/src/inner/x.rs",
            "    pub enum Line<'a> {}\nstruct Kept;\nimpl I for X {\n    type Item = u8;\n}\n",
        );
        write("a/src/tests/y.rs", "pub struct Line;\n");
        write(
            "b/src/lib.rs",
            "pub enum Error {}\ntype Item = u8;\n#[cfg(test)]\npub struct Line;\n",
        );
        assert_eq!(
            repeated_type_names(tree.path(), &["a", "b"]),
            [
                "`Kept` is declared in a/src/inner/x.rs, a/src/lib.rs",
                "`Line` is declared in a/src/inner/x.rs, a/src/lib.rs",
            ]
        );
    }

    #[test]
    fn a_missing_path_crate_or_folder_is_found() {
        let tree = tempfile::tempdir().expect("tempdir");
        for dir in ["a/src/kept", "a/src/kept/deeper", "a/src/stray", "b/src"] {
            std::fs::create_dir_all(tree.path().join(dir)).expect("mkdir");
        }
        std::fs::write(tree.path().join("a/src/one.rs"), "").expect("write");
        let document = "# x\n\n## Code map\n\n**`a`** — the first.\n- `one.rs`, `kept/`: fine; \
                        `gone.rs`: not there.\n\n## Next\n";
        assert_eq!(
            mismatches(tree.path(), document, &["a", "b"]),
            [
                "the code map names `gone.rs` (under `a`), which is not in the tree",
                "the code map does not name the crate `b`",
                "the code map does not name `a/src/stray/`",
            ]
        );
    }
}
