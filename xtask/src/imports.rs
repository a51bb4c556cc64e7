//! The import graph of each crate's modules, checked as a test (it runs in
//! `cargo test --workspace`, so CI runs it): every `crate::…`, `super::…`
//! and `self::…` path in a module's code (comments and its
//! `#[cfg(test)]` tail left out) is an edge to the module it names, and
//! no crate may have a circle of modules; in the CLI no module outside
//! `commands` imports a `commands` module.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

/// Module path (`supervisor::engine`; the crate root is `""`) → the
/// modules it imports.
pub type Graph = BTreeMap<String, BTreeSet<String>>;

/// The graph of the crate whose sources are under `src`.
pub fn graph(src: &Path) -> std::io::Result<Graph> {
    let mut files = Vec::new();
    collect(src, src, &mut files)?;
    let modules: BTreeSet<String> = files.iter().map(|(module, _)| module.clone()).collect();
    let mut graph = Graph::new();
    for (module, text) in &files {
        let edges = graph.entry(module.clone()).or_default();
        for path in paths(&code_of(text)) {
            if let Some(target) = resolve(module, &path, &modules)
                && target != *module
            {
                edges.insert(target);
            }
        }
    }
    Ok(graph)
}

/// The circles of `graph`: its strongly connected components of more than
/// one module (Tarjan's algorithm), each sorted.
pub fn circles(graph: &Graph) -> Vec<Vec<String>> {
    struct State<'a> {
        graph: &'a Graph,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in s.graph.get(v).into_iter().flatten() {
            let w = w.as_str();
            if !s.index.contains_key(w) {
                visit(s, w);
                let low = s.low[v].min(s.low[w]);
                s.low.insert(v, low);
            } else if s.on_stack.contains(w) {
                let low = s.low[v].min(s.index[w]);
                s.low.insert(v, low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                component.push(w.to_owned());
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                s.out.push(component);
            }
        }
    }
    let mut state = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !state.index.contains_key(v.as_str()) {
            visit(&mut state, v);
        }
    }
    state.out
}

fn collect(root: &Path, dir: &Path, out: &mut Vec<(String, String)>) -> std::io::Result<()> {
    let mut entries: Vec<_> = fs::read_dir(dir)?.collect::<Result<_, _>>()?;
    entries.sort_by_key(fs::DirEntry::path);
    for entry in entries {
        let path = entry.path();
        if path.is_dir() {
            // `tests/` beside `tests.rs`: test modules are left out.
            if path.file_name().is_some_and(|n| n != "tests") {
                collect(root, &path, out)?;
            }
            continue;
        }
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let relative = path.strip_prefix(root).unwrap_or(&path).with_extension("");
        let parts: Vec<String> = relative
            .iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect();
        if parts.last().is_some_and(|p| p == "tests") {
            continue;
        }
        let module = match parts.as_slice() {
            [one] if one == "lib" || one == "main" => String::new(),
            parts => parts.join("::"),
        };
        out.push((module, fs::read_to_string(&path)?));
    }
    Ok(())
}

/// The code of a file: comments removed, and everything from its first
/// `#[cfg(test)]` on (the unit tests at the end of a module).
fn code_of(text: &str) -> String {
    let text = text.split("#[cfg(test)]").next().unwrap_or_default();
    text.lines()
        .map(|line| match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every `crate::`/`super::`/`self::` path in `code`, as its segments
/// (`use crate::{a::b, c}` gives `crate::a::b` and `crate::c`).
fn paths(code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if !code.is_char_boundary(i) {
            i += 1;
            continue;
        }
        let rest = &code[i..];
        let starts = ["crate::", "super::", "self::"]
            .iter()
            .any(|p| rest.starts_with(p))
            && (i == 0 || !is_ident(bytes[i - 1]));
        if starts {
            let (found, used) = path_at(rest);
            out.extend(found);
            i += used.max(1);
        } else {
            i += 1;
        }
    }
    out
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// The paths of one path expression at the start of `text`, and how many
/// bytes it took.
fn path_at(text: &str) -> (Vec<Vec<String>>, usize) {
    let mut segments = Vec::new();
    let mut i = 0;
    let bytes = text.as_bytes();
    loop {
        let start = i;
        while i < bytes.len() && is_ident(bytes[i]) {
            i += 1;
        }
        if i > start {
            segments.push(text[start..i].to_owned());
        }
        if text[i..].starts_with("::") {
            i += 2;
            if text[i..].starts_with('{') {
                // A group: each top-level item continues this prefix.
                let mut depth = 0;
                let mut end = i;
                for (j, c) in text[i..].char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = i + j;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                let inner = &text[i + 1..end];
                let mut out = Vec::new();
                for item in split_top(inner) {
                    let item = item.trim();
                    if item.is_empty() {
                        continue;
                    }
                    let (found, _) = path_at(item);
                    for tail in found {
                        let mut full = segments.clone();
                        full.extend(tail);
                        out.push(full);
                    }
                }
                return (out, end + 1);
            }
            continue;
        }
        break;
    }
    (vec![segments], i)
}

fn split_top(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut depth = 0;
    let mut start = 0;
    for (i, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&text[start..]);
    out
}

/// The module `path` (seen in `module`) names: its longest prefix that is
/// a module of the crate.
fn resolve(module: &str, path: &[String], modules: &BTreeSet<String>) -> Option<String> {
    let mut base: Vec<&str> = if module.is_empty() {
        Vec::new()
    } else {
        module.split("::").collect()
    };
    let mut rest = path.iter().map(String::as_str).peekable();
    match rest.next()? {
        "crate" => base.clear(),
        "self" => {}
        "super" => {
            base.pop();
        }
        _ => return None,
    }
    while rest.peek() == Some(&"super") {
        rest.next();
        base.pop();
    }
    let mut best = base.join("::");
    let mut current = base;
    for segment in rest {
        current.push(segment);
        let name = current.join("::");
        if modules.contains(&name) {
            best = name;
        } else {
            break;
        }
    }
    Some(best)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crate_graph(name: &str) -> Graph {
        let src = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join(name)
            .join("src");
        graph(&src).expect("the crate's sources")
    }

    #[test]
    fn paths_and_groups_are_read() {
        let found = paths(&code_of(
            "use crate::{a::b, c};\nlet x = super::d::e(); // crate::f\n#[cfg(test)]\nuse crate::g;",
        ));
        assert_eq!(
            found,
            vec![
                vec!["crate", "a", "b"],
                vec!["crate", "c"],
                vec!["super", "d", "e"],
            ]
        );
    }

    #[test]
    fn no_crate_has_an_import_circle() {
        for name in [
            "omnidev-core",
            "omnidev-pod",
            "omnidev-install",
            "omnidev-cli",
        ] {
            let graph = crate_graph(name);
            assert!(graph.len() > 3, "{name}: modules were read");
            assert_eq!(circles(&graph), Vec::<Vec<String>>::new(), "{name}");
        }
    }

    #[test]
    fn no_cli_module_outside_commands_imports_a_command() {
        let graph = crate_graph("omnidev-cli");
        for (module, edges) in &graph {
            if module == "commands" || module.starts_with("commands::") {
                continue;
            }
            let commands: Vec<&String> = edges
                .iter()
                .filter(|e| e.starts_with("commands::"))
                .collect();
            assert!(commands.is_empty(), "{module} imports {commands:?}");
        }
    }
}
