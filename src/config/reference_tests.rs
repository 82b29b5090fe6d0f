//! `docs/reference.md` against the config types: every key each section and
//! node kind accepts is in the table under its heading, and no table names a
//! key that does not exist.
//!
//! The accepted keys are read from the types themselves: every config struct
//! is `deny_unknown_fields`, so deserializing a table with one unknown key
//! fails with serde's `unknown field ..., expected one of ...`, which lists
//! the struct's fields. The kinds come from the registry (`kinds_for`).

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;
use toml::de::ValueDeserializer;

use super::*;

const BOGUS: &str = "no_such_key_anywhere";

/// The keys a config struct accepts, from the error its deserializer gives for a table holding only [`BOGUS`].
fn accepted<T>(what: &str, de: impl FnOnce(ValueDeserializer<'static>) -> Result<T, toml::de::Error>) -> BTreeSet<String> {
    const TABLE: &str = "{ no_such_key_anywhere = 0 }";
    let Err(e) = de(ValueDeserializer::parse(TABLE).expect("a TOML inline table")) else {
        panic!("{what} accepted the unknown key `{BOGUS}`: is it still `deny_unknown_fields`?");
    };
    let msg = e.message().to_string();
    let rest = msg
        .strip_prefix(&format!("unknown field `{BOGUS}`"))
        .unwrap_or_else(|| panic!("{what}: expected serde's unknown-field error for `{BOGUS}`, got: {msg}"));
    if rest.contains("there are no fields") {
        return BTreeSet::new();
    }
    let listed = rest.split_once("expected").unwrap_or_else(|| panic!("{what}: no field list in: {msg}")).1;
    let keys: BTreeSet<String> = listed.split('`').skip(1).step_by(2).map(str::to_string).collect();
    assert!(!keys.is_empty(), "{what}: no field names in: {msg}");
    keys
}

fn nested(prefix: &str, keys: BTreeSet<String>) -> impl Iterator<Item = String> {
    keys.into_iter().map(move |k| format!("{prefix}.{k}"))
}

/// Heading title of each key section in docs/reference.md → the keys its type accepts.
/// Keys of an inline table are written `table.key` (`queue.capacity`, `providers.tf32`).
fn keys_from_types() -> BTreeMap<String, (Option<Role>, BTreeSet<String>)> {
    let mut sections = BTreeMap::new();
    let mut pipeline = accepted("[pipeline]", Settings::deserialize);
    pipeline.extend(nested("api", accepted("api", api::ApiConfig::deserialize)));
    sections.insert("`[pipeline]`".to_string(), (None, pipeline));
    let mut common = accepted("keys every node may have", Common::deserialize);
    assert_eq!(common, COMMON_KEYS.iter().map(|k| k.to_string()).collect(), "COMMON_KEYS disagrees with `Common`");
    common.extend(nested("queue", accepted("queue", QueueConfig::deserialize)));
    sections.insert("Keys every node may have".to_string(), (None, common));
    for role in [Role::Source, Role::Stage, Role::Sink] {
        for &kind in kinds_for(role) {
            let mut keys = accepted(kind, |d| deserialize_kind(role, kind, d));
            if kind == "infer" {
                keys.extend(nested("providers", accepted("a provider table", ProviderSpec::deserialize)));
                keys.extend(nested("batch", accepted("batch", BatchConfig::deserialize)));
            }
            let previous = sections.insert(format!("`{kind}`"), (Some(role), keys));
            assert!(previous.is_none(), "kind `{kind}` is registered twice");
        }
    }
    sections
}

/// What the page documents: for each heading that is a key section, its level-2
/// heading and the keys named in the first column of the tables under it
/// (down to the next heading of the same or a higher level).
struct Documented {
    sections: BTreeMap<String, (String, BTreeSet<String>)>,
    problems: Vec<String>,
}

fn keys_from_doc(text: &str, known: &BTreeMap<String, (Option<Role>, BTreeSet<String>)>) -> Documented {
    let mut doc = Documented { sections: BTreeMap::new(), problems: Vec::new() };
    let mut h2 = String::new();
    // The key section the current line is in: its title and level.
    let mut current: Option<(String, usize)> = None;
    let mut in_code = false;
    for (n, line) in text.lines().enumerate() {
        let n = n + 1;
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            continue;
        }
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if hashes > 0 && line[hashes..].starts_with(' ') {
            let title = line[hashes..].trim().to_string();
            if hashes == 2 {
                h2 = title.clone();
            }
            if current.as_ref().is_some_and(|(_, level)| hashes <= *level) {
                current = None;
            }
            if known.contains_key(&title) {
                if doc.sections.insert(title.clone(), (h2.clone(), BTreeSet::new())).is_some() {
                    doc.problems.push(format!("line {n}: heading {title} appears twice"));
                }
                current = Some((title, hashes));
            } else if title.starts_with('`') && title.ends_with('`') && !title.contains(' ') {
                doc.problems.push(format!("line {n}: heading {title} names no node kind the config accepts"));
            }
            continue;
        }
        let Some(row) = line.strip_prefix('|') else { continue };
        let first = row.split('|').next().unwrap_or("").trim();
        if !first.starts_with('`') {
            continue; // a header, a separator, or not a key
        }
        let keys: Vec<&str> = first.split('`').skip(1).step_by(2).collect();
        match &current {
            Some((title, _)) => doc.sections.get_mut(title).expect("opened above").1.extend(keys.iter().map(|k| k.to_string())),
            None => doc.problems.push(format!("line {n}: a key table ({}) outside a kind's section", keys.join(", "))),
        }
    }
    doc
}

fn problems(text: &str) -> Vec<String> {
    let known = keys_from_types();
    let doc = keys_from_doc(text, &known);
    let mut problems = doc.problems;
    for (title, (role, accepted)) in &known {
        let Some((h2, documented)) = doc.sections.get(title) else {
            problems.push(format!("no heading {title}"));
            continue;
        };
        if let Some(role) = role {
            let want = match role {
                Role::Source => "Sources",
                Role::Stage => "Stages",
                Role::Sink => "Sinks",
            };
            if h2 != want {
                problems.push(format!("{title} is a {} kind but is documented under `## {h2}`, not `## {want}`", role.noun()));
            }
        }
        for key in accepted.difference(documented) {
            problems.push(format!("{title}: key `{key}` is accepted but not documented in its table"));
        }
        for key in documented.difference(accepted) {
            problems.push(format!("{title}: key `{key}` is documented but not accepted"));
        }
    }
    problems
}

const REFERENCE: &str = include_str!("../../docs/reference.md");

#[test]
fn reference_documents_every_key_and_only_keys_that_exist() {
    let problems = problems(REFERENCE);
    assert!(problems.is_empty(), "docs/reference.md disagrees with the config types:\n  {}", problems.join("\n  "));
}

#[test]
fn the_reference_check_sees_a_missing_a_stray_and_a_misplaced_key() {
    // Each edit of the real page must be caught.
    let row = "| `unclip_ratio` |";
    assert!(REFERENCE.contains(row));
    let without = REFERENCE.replacen(row, "| unclip ratio |", 1);
    assert!(problems(&without).contains(&"`text_detection`: key `unclip_ratio` is accepted but not documented in its table".to_string()));

    let stray = REFERENCE.replacen(row, "| `unclip_ratio`, `unclip_ratoi` |", 1);
    assert!(problems(&stray).contains(&"`text_detection`: key `unclip_ratoi` is documented but not accepted".to_string()));

    let nested = REFERENCE.replacen("| `batch.timeout_ms` |", "| `batch.timeout` |", 1);
    let found = problems(&nested);
    assert!(found.contains(&"`infer`: key `batch.timeout_ms` is accepted but not documented in its table".to_string()), "{found:?}");
    assert!(found.contains(&"`infer`: key `batch.timeout` is documented but not accepted".to_string()), "{found:?}");

    let moved = REFERENCE.replacen("### `null`", "## Other\n\n### `null`", 1);
    assert!(problems(&moved).iter().any(|p| p.starts_with("`null` is a sink kind but is documented under `## Other`")));

    let unknown = REFERENCE.replacen("### `null`", "### `nul`", 1);
    let found = problems(&unknown);
    assert!(found.iter().any(|p| p.ends_with("heading `nul` names no node kind the config accepts")), "{found:?}");
    assert!(found.contains(&"no heading `null`".to_string()), "{found:?}");
}
