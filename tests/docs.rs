//! The documentation's relative links: every link in README.md and docs/*.md
//! that is not a URL points at a file that exists and, with `#anchor`, at a
//! heading of that file (anchors as GitHub makes them from headings).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// README.md and every Markdown file in docs/.
fn pages() -> Vec<PathBuf> {
    let mut pages = vec![root().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .expect("docs/ exists")
        .map(|e| e.expect("readable docs/ entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

/// Lines outside fenced code blocks, with their numbers.
fn prose(text: &str) -> impl Iterator<Item = (usize, &str)> {
    let mut in_code = false;
    text.lines().enumerate().filter_map(move |(n, line)| {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
            return None;
        }
        (!in_code).then_some((n + 1, line))
    })
}

/// GitHub's anchor for a heading: lower case, punctuation other than `-` and
/// `_` dropped, spaces turned into `-`.
fn slug(title: &str) -> String {
    title
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a Markdown file's headings (a repeated heading gets `-1`, `-2`, ...).
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    for (_, line) in prose(text) {
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if hashes == 0 || !line[hashes..].starts_with(' ') {
            continue;
        }
        let base = slug(&line[hashes..]);
        let mut anchor = base.clone();
        let mut i = 1;
        while seen.contains(&anchor) {
            anchor = format!("{base}-{i}");
            i += 1;
        }
        seen.insert(anchor);
    }
    seen
}

/// Link targets on a line: `[text](target)` and `![alt](target)`, code spans left out.
fn links(line: &str) -> Vec<String> {
    // Drop code spans (`...`): their text is not Markdown.
    let mut plain = String::new();
    for (i, part) in line.split('`').enumerate() {
        if i % 2 == 0 {
            plain.push_str(part);
        }
    }
    let mut out = Vec::new();
    let mut rest = plain.as_str();
    while let Some(i) = rest.find("](") {
        let after = &rest[i + 2..];
        let Some(end) = after.find(')') else { break };
        if rest[..i].contains('[') {
            out.push(after[..end].trim().to_string());
        }
        rest = &after[end..];
    }
    out
}

fn is_external(target: &str) -> bool {
    target.contains("://") || target.starts_with("mailto:")
}

/// Every broken relative link in `text` (a page at `page`).
fn broken_links(page: &Path, text: &str) -> Vec<String> {
    let name = page.strip_prefix(root()).unwrap_or(page).display().to_string();
    let mut broken = Vec::new();
    for (n, line) in prose(text) {
        for target in links(line) {
            if is_external(&target) {
                continue;
            }
            let (file, anchor) = match target.split_once('#') {
                Some((f, a)) => (f, Some(a)),
                None => (target.as_str(), None),
            };
            let path = if file.is_empty() { page.to_path_buf() } else { page.parent().expect("a folder").join(file) };
            if !path.exists() {
                broken.push(format!("{name}:{n}: `{target}`: {} does not exist", path.display()));
                continue;
            }
            if let Some(anchor) = anchor {
                let Ok(target_text) = std::fs::read_to_string(&path) else {
                    broken.push(format!("{name}:{n}: `{target}`: an anchor into a file that is not text"));
                    continue;
                };
                if !anchors(&target_text).contains(anchor) {
                    broken.push(format!(
                        "{name}:{n}: `{target}`: no heading with the anchor `#{anchor}` in {file_name}",
                        file_name = if file.is_empty() { &name } else { file }
                    ));
                }
            }
        }
    }
    broken
}

#[test]
fn every_relative_link_in_the_docs_points_at_a_file_and_heading_that_exist() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap_or_else(|e| panic!("{}: {e}", page.display()));
        checked += prose(&text).map(|(_, l)| links(l).len()).sum::<usize>();
        broken.extend(broken_links(&page, &text));
    }
    assert!(checked > 50, "only {checked} links found: is the link reader still finding them?");
    assert!(broken.is_empty(), "broken links:\n  {}", broken.join("\n  "));
}

#[test]
fn the_link_check_sees_a_missing_file_and_a_missing_heading() {
    let readme = root().join("README.md");
    let text = "See [the reference](docs/reference.md#infer), [gone](docs/nope.md), [bad anchor](docs/cli.md#no-such-heading), \
                [here](#quick-start), [not here](#nowhere), `[code](not-a-link.md)` and [web](https://example.com/x).\n\n## Quick start\n";
    let broken = broken_links(&readme, text);
    assert_eq!(broken.len(), 3, "{broken:#?}");
    assert!(broken[0].contains("`docs/nope.md`"), "{broken:#?}");
    assert!(broken[1].contains("`docs/cli.md#no-such-heading`"), "{broken:#?}");
    assert!(broken[2].contains("`#nowhere`"), "{broken:#?}");
}

#[test]
fn anchors_follow_github() {
    let text = "# Speed and `bench`\n## `[pipeline]`\n### `audio_testsrc`\n## Keys every node may have\n## Tests\n## Tests\n";
    let got = anchors(text);
    let want: BTreeSet<String> = ["speed-and-bench", "pipeline", "audio_testsrc", "keys-every-node-may-have", "tests", "tests-1"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(got, want);
}
