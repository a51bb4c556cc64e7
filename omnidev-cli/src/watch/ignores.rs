//! Which paths of a checkout git ignores, as git decides it: every
//! `.gitignore` from the checkout root down (a deeper file overrides a
//! shallower one, `!` re-includes), then `.git/info/exclude`, then the
//! user's `core.excludesFile`; a path inside an ignored directory is
//! ignored whatever its own rules say.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

use ignore::Match;
use ignore::gitignore::{Gitignore, GitignoreBuilder};

use omnidev_core::sync::Locked;

/// The name of a per-directory ignore file.
const GITIGNORE: &str = ".gitignore";

/// The ignore rules of one checkout, read at one moment.
#[derive(Debug)]
pub(super) struct Ignores {
    root: PathBuf,
    /// Each directory holding a `.gitignore`, with its rules.
    nested: BTreeMap<PathBuf, Gitignore>,
    exclude: Gitignore,
    exclude_path: Option<PathBuf>,
    global: Gitignore,
    global_path: Option<PathBuf>,
}

impl Ignores {
    /// No rules.
    fn empty(root: &Path) -> Self {
        Self {
            root: root.to_path_buf(),
            nested: BTreeMap::new(),
            exclude: Gitignore::empty(),
            exclude_path: None,
            global: Gitignore::empty(),
            global_path: None,
        }
    }

    /// Reads the rules for paths under `bases` (directories inside `root`):
    /// the `.gitignore` of `root`, of every directory between `root` and a
    /// base, and of every directory under a base (symbolic links and
    /// `__pycache__` not followed); the repository's `info/exclude` (also
    /// for a worktree, whose `.git` is a file); and `excludes_file`.
    pub(super) fn load(root: &Path, bases: &[PathBuf], excludes_file: Option<PathBuf>) -> Self {
        let mut nested = BTreeMap::new();
        add_nested(&mut nested, root, bases);
        let exclude_path = git_common_dir(root).map(|dir| dir.join("info/exclude"));
        let read_root_relative = |file: &Option<PathBuf>| {
            file.as_deref()
                .filter(|f| f.is_file())
                .map_or_else(Gitignore::empty, |f| read_rules(root, f))
        };
        Self {
            root: root.to_path_buf(),
            nested,
            exclude: read_root_relative(&exclude_path),
            global: read_root_relative(&excludes_file),
            exclude_path,
            global_path: excludes_file,
        }
    }

    /// Whether a change of `path` changes the rules.
    pub(super) fn is_source(&self, path: &Path) -> bool {
        (path.starts_with(&self.root) && path.file_name() == Some(GITIGNORE.as_ref()))
            || self.exclude_path.as_deref() == Some(path)
            || self.global_path.as_deref() == Some(path)
    }

    /// The directories holding rule files outside `bases` (watched on their
    /// own, without their sub-directories): `root` and those between it
    /// and each base, `info/` of the repository, the excludes file's
    /// directory. Only existing directories.
    pub(super) fn source_dirs(&self, bases: &[PathBuf]) -> Vec<PathBuf> {
        let mut dirs: BTreeSet<PathBuf> = BTreeSet::new();
        for base in bases {
            dirs.extend(chain(&self.root, base));
        }
        dirs.insert(self.root.clone());
        for file in [&self.exclude_path, &self.global_path].into_iter().flatten() {
            if let Some(dir) = file.parent() {
                dirs.insert(dir.to_path_buf());
            }
        }
        dirs.into_iter()
            .filter(|dir| dir.is_dir() && !bases.iter().any(|base| dir.starts_with(base)))
            .collect()
    }

    /// Whether git ignores `path` (absolute, inside the root): it or a
    /// directory above it (below the root) is ignored.
    pub(super) fn is_ignored(&self, path: &Path, is_dir: bool) -> bool {
        let Ok(relative) = path.strip_prefix(&self.root) else {
            return false;
        };
        let parts: Vec<Component<'_>> = relative.components().collect();
        let mut current = self.root.clone();
        for (i, part) in parts.iter().enumerate() {
            current.push(part);
            let last = i + 1 == parts.len();
            if self.decides_ignored(&current, !last || is_dir) {
                return true;
            }
        }
        false
    }

    /// The verdict for `path` itself: the deepest `.gitignore` with a
    /// matching rule decides, then `info/exclude`, then the excludes file.
    fn decides_ignored(&self, path: &Path, is_dir: bool) -> bool {
        // Among the directories above `path`, a deeper one sorts later.
        let deepest_first = self
            .nested
            .iter()
            .rev()
            .filter(|(dir, _)| path.starts_with(dir) && path != dir.as_path())
            .map(|(_, rules)| rules);
        for rules in deepest_first.chain([&self.exclude, &self.global]) {
            match rules.matched(path, is_dir) {
                Match::Ignore(_) => return true,
                Match::Whitelist(_) => return false,
                Match::None => {}
            }
        }
        false
    }
}

/// The ignore rules of one checkout, shared by every watcher of it: read
/// once for the bases of all of them, and read again once per change of a
/// rule file, whichever watcher saw it. Compiled rules cost memory in
/// proportion to their number (the `ignore` crate makes a matcher of each
/// glob), so a pod holds them once, not once per watch rule.
#[derive(Debug)]
pub(super) struct RepoIgnores {
    root: PathBuf,
    excludes_file: Option<PathBuf>,
    state: Mutex<IgnoresRead>,
}

#[derive(Debug)]
struct IgnoresRead {
    bases: BTreeSet<PathBuf>,
    ignores: Arc<Ignores>,
    /// When the rules in `ignores` began to be read.
    read_at: Instant,
}

/// Every checkout's shared rules, while a watcher holds them.
type Registered = Mutex<HashMap<(PathBuf, Option<PathBuf>), Weak<RepoIgnores>>>;

fn registry() -> &'static Registered {
    static REGISTRY: std::sync::OnceLock<Registered> = std::sync::OnceLock::new();
    REGISTRY.get_or_init(Registered::default)
}

impl RepoIgnores {
    /// The rules of the checkout at `root`, covering `bases` too (read
    /// again when they add a base).
    pub(super) fn of(root: &Path, bases: &[PathBuf], excludes_file: Option<PathBuf>) -> Arc<Self> {
        let key = (root.to_path_buf(), excludes_file.clone());
        let shared = {
            let mut registry = registry().locked();
            registry.retain(|_, shared| shared.strong_count() > 0);
            if let Some(shared) = registry.get(&key).and_then(Weak::upgrade) {
                shared
            } else {
                let shared = Arc::new(Self {
                    root: root.to_path_buf(),
                    excludes_file,
                    state: Mutex::new(IgnoresRead {
                        bases: BTreeSet::new(),
                        ignores: Arc::new(Ignores::empty(root)),
                        read_at: Instant::now(),
                    }),
                });
                registry.insert(key, Arc::downgrade(&shared));
                shared
            }
        };
        let mut state = shared.state.locked();
        let new: Vec<PathBuf> =
            bases.iter().filter(|base| state.bases.insert((*base).clone())).cloned().collect();
        if state.bases.len() == new.len() {
            shared.read(&mut state);
        } else if !new.is_empty() {
            // Only the new bases' files are read (the checkout's own
            // rules stay), unless a watcher holds the current set.
            match Arc::get_mut(&mut state.ignores) {
                Some(ignores) => add_nested(&mut ignores.nested, root, &new),
                None => shared.read(&mut state),
            }
        }
        drop(state);
        shared
    }

    /// The rules now.
    pub(super) fn current(&self) -> Arc<Ignores> {
        self.state.locked().ignores.clone()
    }

    /// Reads the rules again, unless they were read after `seen` (another
    /// watcher saw the same change first).
    pub(super) fn reread(&self, seen: Instant) {
        let mut state = self.state.locked();
        if state.read_at < seen {
            self.read(&mut state);
        }
    }

    fn read(&self, state: &mut IgnoresRead) {
        // The old rules go first: never two sets at once.
        state.ignores = Arc::new(Ignores::empty(&self.root));
        state.read_at = Instant::now();
        let bases: Vec<PathBuf> = state.bases.iter().cloned().collect();
        state.ignores = Arc::new(Ignores::load(&self.root, &bases, self.excludes_file.clone()));
    }
}

/// Adds the rules of every `.gitignore` in `root`, between it and each
/// base, and under each base (not already in `nested`).
fn add_nested(nested: &mut BTreeMap<PathBuf, Gitignore>, root: &Path, bases: &[PathBuf]) {
    let mut dirs: BTreeSet<PathBuf> = BTreeSet::new();
    for base in bases {
        dirs.extend(chain(root, base));
        walk(base, usize::MAX, &mut |path, is_dir| {
            if is_dir {
                dirs.insert(path.to_path_buf());
            }
        });
    }
    dirs.insert(root.to_path_buf());
    for dir in dirs {
        let file = dir.join(GITIGNORE);
        if nested.contains_key(&dir) || !file.is_file() {
            continue;
        }
        let rules = read_rules(&dir, &file);
        if !rules.is_empty() {
            nested.insert(dir, rules);
        }
    }
}

/// The rules of `file`, relative to `dir`. A line git would reject only
/// loses that line; an unreadable file is no rules.
fn read_rules(dir: &Path, file: &Path) -> Gitignore {
    let mut builder = GitignoreBuilder::new(dir);
    let _ = builder.add(file);
    builder.build().unwrap_or_else(|_| Gitignore::empty())
}

/// The directories from `root` (excluded) down to `base` (included).
fn chain(root: &Path, base: &Path) -> Vec<PathBuf> {
    let Ok(relative) = base.strip_prefix(root) else {
        return Vec::new();
    };
    let mut current = root.to_path_buf();
    relative
        .components()
        .map(|part| {
            current.push(part);
            current.clone()
        })
        .collect()
}

/// The repository's common git directory: `<root>/.git`, or for a
/// worktree (`.git` is a file saying `gitdir: …`) the directory its
/// `commondir` names.
fn git_common_dir(root: &Path) -> Option<PathBuf> {
    let git_dir = omnidev_pod::root::git_dir(root)?;
    let common = omnidev_pod::root::short_text(&git_dir.join("commondir"))
        .map_or_else(|| git_dir.clone(), |c| git_dir.join(c.trim()));
    // Canonical, so event paths (from a canonical root) compare equal.
    std::fs::canonicalize(common).ok()
}

/// Calls `visit(path, is_dir)` for every entry under `dir` (not `dir`
/// itself), without following symbolic links or entering `__pycache__`,
/// visiting at most `max_dirs` directories.
pub(super) fn walk(dir: &Path, max_dirs: usize, visit: &mut dyn FnMut(&Path, bool)) {
    let mut stack = vec![dir.to_path_buf()];
    let mut dirs = 0usize;
    while let Some(dir) = stack.pop() {
        dirs += 1;
        if dirs > max_dirs {
            return;
        }
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.filter_map(std::result::Result::ok) {
            // file_type() does not follow a symbolic link.
            let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
            let path = entry.path();
            if is_dir && entry.file_name() == "__pycache__" {
                continue;
            }
            visit(&path, is_dir);
            if is_dir {
                stack.push(path);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    }

    #[test]
    fn deeper_files_override_and_ignored_directories_stay_ignored() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        let base = root.join("src");
        write(&root.join(".gitignore"), "*.gen.py\nbuild/\n");
        write(&base.join("pkg/.gitignore"), "!keep.gen.py\nlocal.py\n");
        write(&root.join(".git/info/exclude"), "scratch.py\n");
        let global = root.join("global-ignore");
        write(&global, "*.tmp.py\n");
        let rules = Ignores::load(root, std::slice::from_ref(&base), Some(global.clone()));
        let ignored = |p: &str| Ignores::is_ignored(&rules, &root.join(p), false);
        assert!(ignored("src/a.gen.py"));
        assert!(ignored("src/pkg/b.gen.py"));
        assert!(!ignored("src/pkg/keep.gen.py"), "re-included deeper down");
        assert!(ignored("src/pkg/local.py"));
        assert!(!ignored("src/local.py"), "the rule is pkg's only");
        assert!(ignored("src/build/x.py"), "inside an ignored directory");
        assert!(ignored("src/scratch.py"), "info/exclude");
        assert!(ignored("src/x.tmp.py"), "core.excludesFile");
        assert!(!ignored("src/app.py"));
        assert!(rules.is_source(&base.join("new/.gitignore")));
        assert!(rules.is_source(&root.join(".git/info/exclude")));
        assert!(rules.is_source(&global));
        assert!(!rules.is_source(&base.join("app.py")));
        assert_eq!(rules.source_dirs(&[base]), vec![root.to_path_buf(), root.join(".git/info")]);
    }

    #[test]
    fn watchers_of_one_checkout_share_one_set_of_rules_read_once_per_change() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        write(&root.join(".gitignore"), "*.gen.py\n");
        write(&root.join("b/.gitignore"), "local.py\n");
        let a = RepoIgnores::of(root, &[root.join("a")], None);
        let b = RepoIgnores::of(root, &[root.join("b")], None);
        assert!(Arc::ptr_eq(&a, &b), "one set per checkout");
        // The second watcher's base was read in.
        assert!(a.current().is_ignored(&root.join("b/local.py"), false));
        let before = a.current();
        let seen = Instant::now();
        write(&root.join(".gitignore"), "*.tmp.py\n");
        a.reread(seen);
        let after = a.current();
        assert!(!Arc::ptr_eq(&before, &after), "read again");
        assert!(after.is_ignored(&root.join("a/x.tmp.py"), false));
        // The other watcher saw the same change earlier: not read twice.
        b.reread(seen);
        assert!(Arc::ptr_eq(&after, &b.current()));
        drop((a, b, before, after));
        let fresh = RepoIgnores::of(root, &[root.join("a")], None);
        assert!(!fresh.current().is_ignored(&root.join("b/local.py"), false));
    }

    #[test]
    fn a_worktree_reads_the_common_exclude() {
        let dir = tempfile::tempdir().expect("tempdir");
        let main = dir.path().join("main");
        let worktree = dir.path().join("wt");
        write(&main.join(".git/info/exclude"), "secret.py\n");
        write(&main.join(".git/worktrees/wt/commondir"), "../..\n");
        write(
            &worktree.join(".git"),
            &format!("gitdir: {}\n", main.join(".git/worktrees/wt").display()),
        );
        let ignores = Ignores::load(&worktree, &[worktree.join("src")], None);
        assert!(ignores.is_ignored(&worktree.join("src/secret.py"), false));
    }
}
