//! The house's shape, read from its own source with `syn`: no import circle
//! between files of different modules, and no source or test file past the
//! size a reader can hold ([`MAX_LINES`]).
//!
//! A module is a file (`src/a/b.rs` or `src/a/b/mod.rs` is `a::b`). A file
//! imports another when it names a path into it: a `use` (`crate::`,
//! `super::`, `self::`), or a path in the code or inside a macro's tokens.
//! A path names the deepest module it reaches. Imports between a module and
//! its own submodules (either way) do not count: a `mod.rs` declares its
//! children and they use what it holds. Test code (`#[cfg(test)]` modules,
//! `tests.rs` and `*_tests.rs` files) is left out: tests may reach anywhere.
//! The library (`src/lib.rs`) and the binary (`src/main.rs`, `src/cli/`)
//! are checked each on its own: the binary reaches the library only through
//! `infer_stream::`, which cannot lead back.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use proc_macro2::{TokenStream, TokenTree};
use syn::visit::Visit;

type Module = Vec<String>;

/// The library's top-level modules by floor (docs/development.md, "Layout"):
/// a module imports from its own floor or below, never from above.
const FLOORS: &[(&str, u8)] = &[
    ("track", 0),
    ("config", 1),
    ("features", 1),
    ("frame", 2),
    ("backend", 2),
    ("analytics", 2),
    ("gating", 2),
    ("graph", 3),
    ("bus", 3),
    ("runtime", 4),
    ("metrics", 4),
    ("stages", 5),
    ("bench", 6),
    ("capacity", 6),
    ("doctor", 6),
    ("gpu_check", 6),
    ("api", 6),
];

/// The most lines a file under `src/` or `tests/` may have: past it, split
/// by concern (a module's long tests go in a file of their own; an
/// integration test becomes a folder, `tests/NAME/main.rs` and its modules).
const MAX_LINES: usize = 800;

/// A crate's modules and their files.
type Files = Vec<(Module, PathBuf)>;

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every `.rs` file under `dir`, recursively.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The module a file is, relative to `src/` (the crate roots are `[]`).
fn module_of(rel: &Path) -> Module {
    let mut m: Module = rel.with_extension("").iter().map(|c| c.to_string_lossy().into_owned()).collect();
    if matches!(m.last().map(String::as_str), Some("mod" | "lib" | "main")) {
        m.pop();
    }
    m
}

fn is_test_file(rel: &Path) -> bool {
    let stem = rel.file_stem().unwrap().to_string_lossy();
    stem == "tests" || stem.ends_with("_tests")
}

fn is_cfg_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| a.path().is_ident("cfg") && a.meta.require_list().is_ok_and(|l| l.tokens.to_string() == "test"))
}

/// Paths a file names that start at `crate`, `super` or `self`.
#[derive(Default)]
struct Paths(Vec<Vec<String>>);

impl Paths {
    fn add(&mut self, segs: Vec<String>) {
        if segs.first().is_some_and(|s| matches!(s.as_str(), "crate" | "super" | "self")) {
            self.0.push(segs);
        }
    }

    fn tree(&mut self, prefix: &[String], t: &syn::UseTree) {
        let with = |s: String| {
            let mut p = prefix.to_vec();
            p.push(s);
            p
        };
        match t {
            syn::UseTree::Path(p) => self.tree(&with(p.ident.to_string()), &p.tree),
            syn::UseTree::Name(n) => self.add(with(n.ident.to_string())),
            syn::UseTree::Rename(r) => self.add(with(r.ident.to_string())),
            syn::UseTree::Glob(_) => self.add(prefix.to_vec()),
            syn::UseTree::Group(g) => g.items.iter().for_each(|i| self.tree(prefix, i)),
        }
    }

    /// `crate::a::b`, `super::super::c`, `self::d` in a macro's tokens.
    fn tokens(&mut self, ts: TokenStream) {
        let tokens: Vec<TokenTree> = ts.into_iter().collect();
        let mut i = 0;
        while i < tokens.len() {
            match &tokens[i] {
                TokenTree::Group(g) => self.tokens(g.stream()),
                TokenTree::Ident(id) if matches!(id.to_string().as_str(), "crate" | "super" | "self") => {
                    let mut segs = vec![id.to_string()];
                    let mut j = i + 1;
                    while j + 2 < tokens.len() && is_colon(&tokens[j]) && is_colon(&tokens[j + 1]) {
                        match &tokens[j + 2] {
                            TokenTree::Ident(next) => segs.push(next.to_string()),
                            _ => break,
                        }
                        j += 3;
                    }
                    if segs.len() > 1 {
                        self.add(segs);
                    }
                    i = j.max(i + 1);
                    continue;
                }
                _ => {}
            }
            i += 1;
        }
    }
}

fn is_colon(t: &TokenTree) -> bool {
    matches!(t, TokenTree::Punct(p) if p.as_char() == ':')
}

impl<'ast> Visit<'ast> for Paths {
    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if !is_cfg_test(&m.attrs) {
            syn::visit::visit_item_mod(self, m);
        }
    }
    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        if !is_cfg_test(&f.attrs) {
            syn::visit::visit_item_fn(self, f);
        }
    }
    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        if !is_cfg_test(&u.attrs) {
            self.tree(&[], &u.tree);
        }
    }
    fn visit_path(&mut self, p: &'ast syn::Path) {
        self.add(p.segments.iter().map(|s| s.ident.to_string()).collect());
        syn::visit::visit_path(self, p);
    }
    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        self.tokens(m.tokens.clone());
    }
}

/// The deepest module of `modules` that `path`, named in `from`, reaches.
fn resolve(from: &Module, path: &[String], modules: &BTreeSet<Module>) -> Option<Module> {
    let mut base: Module = Vec::new();
    let mut rest = path;
    match path.first().map(String::as_str) {
        Some("crate") => rest = &path[1..],
        _ => {
            base = from.clone();
            while let Some(s) = rest.first() {
                match s.as_str() {
                    "super" => {
                        base.pop();
                    }
                    "self" => {}
                    _ => break,
                }
                rest = &rest[1..];
            }
        }
    }
    let full: Module = base.into_iter().chain(rest.iter().cloned()).collect();
    (0..=full.len()).rev().map(|k| full[..k].to_vec()).find(|m| modules.contains(m))
}

fn related(a: &Module, b: &Module) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

/// Strongly connected groups of more than one module (Tarjan).
fn circles(edges: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<Vec<Module>> {
    struct T<'a> {
        edges: &'a BTreeMap<Module, BTreeSet<Module>>,
        index: BTreeMap<Module, usize>,
        low: BTreeMap<Module, usize>,
        stack: Vec<Module>,
        on: BTreeSet<Module>,
        out: Vec<Vec<Module>>,
    }
    impl T<'_> {
        fn visit(&mut self, v: &Module) {
            let n = self.index.len();
            self.index.insert(v.clone(), n);
            self.low.insert(v.clone(), n);
            self.stack.push(v.clone());
            self.on.insert(v.clone());
            for w in self.edges.get(v).into_iter().flatten() {
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let l = self.low[v].min(self.low[w]);
                    self.low.insert(v.clone(), l);
                } else if self.on.contains(w) {
                    let l = self.low[v].min(self.index[w]);
                    self.low.insert(v.clone(), l);
                }
            }
            if self.low[v] == self.index[v] {
                let mut group = Vec::new();
                loop {
                    let w = self.stack.pop().unwrap();
                    self.on.remove(&w);
                    let done = &w == v;
                    group.push(w);
                    if done {
                        break;
                    }
                }
                if group.len() > 1 {
                    self.out.push(group);
                }
            }
        }
    }
    let mut t = T { edges, index: BTreeMap::new(), low: BTreeMap::new(), stack: Vec::new(), on: BTreeSet::new(), out: Vec::new() };
    for v in edges.keys() {
        if !t.index.contains_key(v) {
            t.visit(v);
        }
    }
    t.out
}

/// The imports between modules of one crate, test code left out.
fn imports(files: &[(Module, PathBuf)]) -> BTreeMap<Module, BTreeSet<Module>> {
    let modules: BTreeSet<Module> = files.iter().map(|(m, _)| m.clone()).collect();
    let mut edges: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for (m, path) in files {
        let text = std::fs::read_to_string(path).unwrap();
        let file = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let mut paths = Paths::default();
        paths.visit_file(&file);
        let to = edges.entry(m.clone()).or_default();
        for p in &paths.0 {
            if let Some(target) = resolve(m, p, &modules)
                && !related(m, &target)
            {
                to.insert(target);
            }
        }
    }
    edges
}

fn show(m: &Module) -> String {
    if m.is_empty() { "crate".into() } else { m.join("::") }
}

/// Both crates' modules: (library, binary).
fn crates() -> (Files, Files) {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let (mut lib, mut bin) = (Vec::new(), Vec::new());
    for p in files {
        let rel = p.strip_prefix(src()).unwrap().to_path_buf();
        if is_test_file(&rel) {
            continue;
        }
        let m = module_of(&rel);
        let in_bin = rel == Path::new("main.rs") || rel.starts_with("cli");
        if in_bin { bin.push((m, p)) } else { lib.push((m, p)) }
    }
    (lib, bin)
}

/// The circles of a crate, each with the imports that close it.
fn describe(edges: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<String> {
    circles(edges)
        .into_iter()
        .map(|group| {
            let set: BTreeSet<&Module> = group.iter().collect();
            let mut lines: Vec<String> = Vec::new();
            for a in &group {
                for b in edges.get(a).into_iter().flatten().filter(|b| set.contains(b)) {
                    lines.push(format!("  {} -> {}", show(a), show(b)));
                }
            }
            lines.sort();
            format!("circle of {}:\n{}", group.iter().map(show).collect::<Vec<_>>().join(", "), lines.join("\n"))
        })
        .collect()
}

#[test]
fn no_import_circle_between_modules() {
    let (lib, bin) = crates();
    assert!(lib.len() > 50, "the library's files: {}", lib.len());
    let mut found = describe(&imports(&lib));
    found.extend(describe(&imports(&bin)));
    assert!(found.is_empty(), "import circles (docs/development.md says what may import what):\n{}", found.join("\n"));
}

/// The checker sees a circle when there is one: two sibling modules that
/// import each other, one through a `use` and one through a path in a macro.
#[test]
fn the_checker_finds_a_circle() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.rs");
    let b = dir.path().join("b.rs");
    let c = dir.path().join("c.rs");
    std::fs::write(&a, "use crate::b::Thing;\npub struct Other;\n").unwrap();
    std::fs::write(&b, "pub struct Thing;\nfn f() { println!(\"{}\", std::mem::size_of::<crate::a::Other>()); }\n").unwrap();
    std::fs::write(&c, "use super::a::Other;\n#[cfg(test)]\nmod tests { use crate::c::*; }\n").unwrap();
    let m = |s: &str| vec![s.to_string()];
    let files = vec![(m("a"), a), (m("b"), b), (m("c"), c)];
    let edges = imports(&files);
    let found = describe(&edges);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].contains("a -> b") && found[0].contains("b -> a"), "{}", found[0]);
    assert_eq!(edges[&m("c")], BTreeSet::from([m("a")]), "super:: resolves; test modules are left out");
}

#[test]
fn no_source_file_past_max_lines() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    rust_files(&root.join("tests"), &mut files);
    let mut long: Vec<String> = files
        .iter()
        .filter_map(|p| {
            let n = std::fs::read_to_string(p).unwrap().lines().count();
            (n > MAX_LINES).then(|| format!("{} ({n} lines)", p.strip_prefix(root).unwrap().display()))
        })
        .collect();
    long.sort();
    assert!(long.is_empty(), "files over {MAX_LINES} lines: split them by concern:\n{}", long.join("\n"));
}

#[test]
fn no_import_from_a_floor_above() {
    let (lib, _) = crates();
    let floor = |m: &Module| m.first().map(|top| FLOORS.iter().find(|(n, _)| n == top).map(|(_, f)| *f));
    let mut wrong = Vec::new();
    for m in lib.iter().map(|(m, _)| m) {
        if let Some(None) = floor(m) {
            wrong.push(format!("{}: a top-level module with no floor: add it to FLOORS and docs/development.md", show(m)));
        }
    }
    wrong.dedup();
    for (a, targets) in imports(&lib) {
        for b in targets {
            if let (Some(Some(fa)), Some(Some(fb))) = (floor(&a), floor(&b))
                && fb > fa
            {
                wrong.push(format!("{} (floor {fa}) imports {} (floor {fb})", show(&a), show(&b)));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
