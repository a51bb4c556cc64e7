//! The import graph of each crate's modules, checked as a test (it runs in
//! `cargo test --workspace`, so CI runs it): every `crate::…`, `super::…`
//! and `self::…` path in a module's code, and every `name::…` that names a
//! child module (comments and its `#[cfg(test)]` tail left out), is an
//! edge to the module it names. No crate may have a circle of modules, and
//! the CLI's modules keep to its layers ([`CLI_LAYERS`], the list in
//! docs/design.md): each imports only modules of its own layer or the
//! ones before it.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

/// Module path (`supervisor::engine`; the crate root is `""`) → the
/// modules it imports.
pub type Graph = BTreeMap<String, BTreeSet<String>>;

/// The CLI's layers (docs/design.md), first the one that imports nothing:
/// a module belongs to the layer naming it or the nearest module it is
/// inside (`tui::app` is `tui`'s), and imports only modules of its own
/// layer or of those before it. Every module is in a layer.
pub const CLI_LAYERS: &[&[&str]] = &[
    &["error"],
    &["cli"],
    &["run_options"],
    // Where a pod's socket is, and what goes over it.
    &["control", "control::protocol", "control::events"],
    &["output", "detached_log"],
    // Asking a pod, and reading its log files.
    &["control::client", "control::inspect", "log_files"],
    &["session"],
    // Starting a pod in the background (`up --detach`, MCP and dashboard
    // `up`); a pod's database data (`db snapshot`, MCP, the dashboard); a
    // pod on another host (`up --host`).
    &["detach", "pod_data", "remote"],
    // Running a pod: the watchers and the front-ends.
    &["watch", "live_profile", "tui", "headless", "mcp", "dashboard"],
    // Serving a running pod's socket.
    &["control::retained", "control::server"],
    &["commands"],
    &[""],
];

/// The index in `layers` of the layer `module` belongs to.
pub fn layer_of(layers: &[&[&str]], module: &str) -> Option<usize> {
    let mut best: Option<(usize, usize)> = None;
    for (index, layer) in layers.iter().enumerate() {
        for name in *layer {
            let holds =
                module == *name || (!name.is_empty() && module.starts_with(&format!("{name}::")));
            if holds && best.is_none_or(|(_, len)| name.len() > len) {
                best = Some((index, name.len()));
            }
        }
    }
    best.map(|(index, _)| index)
}

/// Each edge of `graph` that goes down the layers (from a module to one of
/// a later layer), and each module in no layer, worded.
pub fn layer_breaches(graph: &Graph, layers: &[&[&str]]) -> Vec<String> {
    let mut out = Vec::new();
    for (module, edges) in graph {
        let Some(own) = layer_of(layers, module) else {
            out.push(format!("`{module}` is in no layer"));
            continue;
        };
        for target in edges {
            if let Some(theirs) = layer_of(layers, target)
                && theirs > own
            {
                out.push(format!(
                    "`{module}` (layer {own}) imports `{target}` (layer {theirs}, after it)"
                ));
            }
        }
    }
    out
}

/// The graph of the crate whose sources are under `src`. A path through a
/// re-export (`crate::Pod`, where the root has `pub use pod::Pod`) is an
/// edge to the module the item comes from, not to the one re-exporting it;
/// a module's paths into its own submodules are no edges (it is made of
/// them), a submodule's paths to its parent are.
pub fn graph(src: &Path) -> std::io::Result<Graph> {
    let mut files = Vec::new();
    collect(src, src, &mut files)?;
    let modules: BTreeSet<String> = files.iter().map(|(module, _)| module.clone()).collect();
    let codes: Vec<(&String, String)> =
        files.iter().map(|(module, text)| (module, code_of(text))).collect();
    // (module, item it re-exports) → the module the item comes from.
    let mut reexports: BTreeMap<(String, String), String> = BTreeMap::new();
    for (module, code) in &codes {
        for path in reexported(code) {
            if let (Some(item), Some((from, _))) = (path.last(), resolve(module, &path, &modules))
                && from != **module
            {
                reexports.insert(((*module).clone(), item.clone()), from);
            }
        }
    }
    let mut graph = Graph::new();
    for (module, code) in &codes {
        let edges = graph.entry((*module).clone()).or_default();
        for path in paths(code) {
            let Some((mut target, mut item)) = resolve(module, &path, &modules) else {
                continue;
            };
            // Through re-exports (a few levels at most) to the source.
            for _ in 0..4 {
                let key = (target.clone(), item.clone().unwrap_or_default());
                match reexports.get(&key) {
                    Some(from) if from != *module => {
                        target.clone_from(from);
                        item = None;
                    }
                    _ => break,
                }
            }
            // A module composes its own submodules: only its edges out
            // of itself count (a child's use of its parent does).
            let inside = module.is_empty() || target.starts_with(&format!("{module}::"));
            if target != **module && !inside {
                edges.insert(target);
            }
        }
    }
    Ok(graph)
}

/// The paths of the `pub use` (and `pub(crate) use`) items of `code`.
fn reexported(code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for start in ["pub use ", "pub(crate) use "] {
        let mut rest = code;
        while let Some(at) = rest.find(start) {
            let statement = &rest[at + start.len()..];
            let end = statement.find(';').unwrap_or(statement.len());
            out.extend(path_at(statement[..end].trim()).0);
            rest = &statement[end..];
        }
    }
    out
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
        let parts: Vec<String> =
            relative.iter().map(|p| p.to_string_lossy().into_owned()).collect();
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

/// Every `crate::`/`super::`/`self::` path in `code`, and every other path
/// (`name::…`, which names a child module when there is one), as its
/// segments (`use crate::{a::b, c}` gives `crate::a::b` and `crate::c`).
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
        let after_path = i > 0 && (is_ident(bytes[i - 1]) || bytes[i - 1] == b':');
        let starts = !after_path
            && (["crate::", "super::", "self::"].iter().any(|p| rest.starts_with(p))
                || bare_start(rest));
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

/// Whether `text` starts with `name::`, a path that may name a child
/// module (`use server::ControlServer` in `control.rs`).
fn bare_start(text: &str) -> bool {
    let bytes = text.as_bytes();
    let len = bytes.iter().take_while(|b| is_ident(**b)).count();
    len > 0 && !bytes[0].is_ascii_digit() && text[len..].starts_with("::")
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
/// a module of the crate, and the segment after it (an item of it).
fn resolve(
    module: &str,
    path: &[String],
    modules: &BTreeSet<String>,
) -> Option<(String, Option<String>)> {
    let mut base: Vec<&str> =
        if module.is_empty() { Vec::new() } else { module.split("::").collect() };
    let mut rest = path.iter().map(String::as_str).peekable();
    match rest.next()? {
        "crate" => base.clear(),
        "self" => {}
        "super" => {
            base.pop();
        }
        // A child module of `module`, or something else (`std::…`, a
        // type's associated item): not an edge.
        child => {
            base.push(child);
            if !modules.contains(&base.join("::")) {
                return None;
            }
        }
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
            return Some((best, Some(segment.to_owned())));
        }
    }
    Some((best, None))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crate_graph(name: &str) -> Graph {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(name).join("src");
        graph(&src).expect("the crate's sources")
    }

    #[test]
    fn paths_and_groups_are_read() {
        let found = paths(&code_of(
            "use crate::{a::b, c};\nlet x = super::d::e(); // crate::f\n#[cfg(test)]\nuse crate::g;",
        ));
        assert_eq!(
            found,
            vec![vec!["crate", "a", "b"], vec!["crate", "c"], vec!["super", "d", "e"],]
        );
    }

    #[test]
    fn no_crate_has_an_import_circle() {
        for name in ["omnidev-core", "omnidev-pod", "omnidev-install", "omnidev-cli"] {
            let graph = crate_graph(name);
            assert!(graph.len() > 3, "{name}: modules were read");
            assert_eq!(circles(&graph), Vec::<Vec<String>>::new(), "{name}");
        }
    }

    #[test]
    fn the_cli_keeps_to_its_layers() {
        let graph = crate_graph("omnidev-cli");
        assert_eq!(layer_breaches(&graph, CLI_LAYERS), Vec::<String>::new());
        assert_eq!(layer_of(CLI_LAYERS, "tui::app"), layer_of(CLI_LAYERS, "tui"));
    }

    #[test]
    fn a_breach_and_a_module_in_no_layer_are_found() {
        let layers: &[&[&str]] = &[&["low"], &["high"]];
        let graph: Graph = [
            ("low".to_owned(), ["high::part".to_owned()].into()),
            ("high::part".to_owned(), ["low".to_owned()].into()),
            ("stray".to_owned(), BTreeSet::new()),
        ]
        .into();
        assert_eq!(
            layer_breaches(&graph, layers),
            ["`low` (layer 0) imports `high::part` (layer 1, after it)", "`stray` is in no layer",]
        );
    }

    #[test]
    fn reexports_lead_to_their_source_and_children_are_no_edges() {
        let dir = tempfile::tempdir().expect("tempdir");
        let write = |name: &str, text: &str| {
            let path = dir.path().join(name);
            fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            fs::write(path, text).expect("write");
        };
        write("lib.rs", "pub mod a;\npub mod b;\npub use a::Thing;\n");
        write("a.rs", "pub mod inner;\npub use inner::Deep;\npub struct Thing;\n");
        write("a/inner.rs", "pub struct Deep;\nuse super::Thing;\n");
        write("b.rs", "use crate::Thing;\nfn f() -> crate::a::Deep { inner::x() }\n");
        let graph = graph(dir.path()).expect("graph");
        let edges = |m: &str| graph[m].iter().cloned().collect::<Vec<_>>();
        assert_eq!(edges(""), Vec::<String>::new());
        assert_eq!(edges("a"), Vec::<String>::new());
        assert_eq!(edges("a::inner"), ["a"]);
        assert_eq!(edges("b"), ["a", "a::inner"]);
    }
}
