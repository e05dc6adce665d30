//! Prompts, resources and resource templates in a candidate (SPEC §11): validated at
//! commit with the tools, committed and fenced with them as one generation, and the resource
//! URIs that two connectors claim. Pure: values in, validated values or one problem per line
//! out.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use serde_json::Value;

use crate::naming::local_name;
use crate::toolset::ValidTool;

/// One prompt as the upstream offered it.
#[derive(Clone, Debug)]
pub struct OfferedPrompt {
    pub upstream_name: String,
    pub definition_json: String,
}

/// One resource (by `uri`) or resource template (by `uriTemplate`) as the upstream offered it.
#[derive(Clone, Debug)]
pub struct OfferedResource {
    pub uri: String,
    pub definition_json: String,
}

/// A prompt that passed validation, with its local name (SPEC §5.1 rule).
#[derive(Clone, Debug, PartialEq)]
pub struct ValidPrompt {
    pub local_name: String,
    pub upstream_name: String,
    pub definition_json: String,
}

/// A resource or template that passed validation: its URI (template) unchanged.
#[derive(Clone, Debug, PartialEq)]
pub struct ValidResource {
    pub uri: String,
    pub definition_json: String,
}

/// Everything a generation offers beyond tools.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Catalog {
    /// Sorted by local name.
    pub prompts: Vec<ValidPrompt>,
    /// Sorted by URI.
    pub resources: Vec<ValidResource>,
    /// Sorted by URI template.
    pub templates: Vec<ValidResource>,
    pub completions: bool,
    pub subscribe: bool,
}

/// A validated candidate: the tools and the rest, committed together.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Candidate {
    pub tools: Vec<ValidTool>,
    pub catalog: Catalog,
}

/// The offer beyond tools, as it came.
#[derive(Clone, Debug, Default)]
pub struct Offered {
    pub prompts: Vec<OfferedPrompt>,
    pub resources: Vec<OfferedResource>,
    pub templates: Vec<OfferedResource>,
    pub completions: bool,
    pub subscribe: bool,
}

/// Validates the offer beyond tools: prompt names by the §5.1 rule (two prompts with one local
/// name refuse the candidate, as tools do), every definition a JSON object, URIs and templates
/// not empty and not listed twice. Any problem refuses the whole candidate.
pub fn validate(key: &str, offered: &Offered) -> Result<Catalog, Vec<String>> {
    let mut problems = Vec::new();
    let mut seen: BTreeMap<String, &str> = BTreeMap::new();
    let mut prompts = Vec::with_capacity(offered.prompts.len());
    for prompt in &offered.prompts {
        if prompt.upstream_name.is_empty() {
            problems.push("a prompt has an empty name".to_owned());
            continue;
        }
        let local = local_name(key, &prompt.upstream_name);
        if let Some(other) = seen.insert(local.clone(), &prompt.upstream_name) {
            problems.push(format!(
                "prompts {other:?} and {:?} both map to the local name {local}",
                prompt.upstream_name
            ));
            continue;
        }
        if !is_object(&prompt.definition_json) {
            problems.push(format!(
                "prompt {:?}: its definition is not a JSON object",
                prompt.upstream_name
            ));
            continue;
        }
        prompts.push(ValidPrompt {
            local_name: local,
            upstream_name: prompt.upstream_name.clone(),
            definition_json: prompt.definition_json.clone(),
        });
    }
    let resources = valid_resources("resource", "uri", &offered.resources, &mut problems);
    let templates = valid_resources(
        "resource template",
        "uriTemplate",
        &offered.templates,
        &mut problems,
    );
    if !problems.is_empty() {
        return Err(problems);
    }
    prompts.sort_by(|a, b| a.local_name.cmp(&b.local_name));
    Ok(Catalog {
        prompts,
        resources,
        templates,
        completions: offered.completions,
        subscribe: offered.subscribe,
    })
}

fn valid_resources(
    what: &str,
    field: &str,
    offered: &[OfferedResource],
    problems: &mut Vec<String>,
) -> Vec<ValidResource> {
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(offered.len());
    for item in offered {
        if item.uri.is_empty() {
            problems.push(format!("a {what} has no {field}"));
        } else if !seen.insert(item.uri.as_str()) {
            problems.push(format!("{what} {:?} is listed twice", item.uri));
        } else if !is_object(&item.definition_json) {
            problems.push(format!(
                "{what} {:?}: its definition is not a JSON object",
                item.uri
            ));
        } else {
            out.push(ValidResource {
                uri: item.uri.clone(),
                definition_json: item.definition_json.clone(),
            });
        }
    }
    out.sort_by(|a, b| a.uri.cmp(&b.uri));
    out
}

fn is_object(text: &str) -> bool {
    matches!(serde_json::from_str::<Value>(text), Ok(Value::Object(_)))
}

/// A URI (or an identical URI template) that more than one ready connector claims: no
/// connector serves it (SPEC §11).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Clash {
    /// `resource` or `template`.
    pub kind: &'static str,
    pub uri: String,
    /// Sorted keys.
    pub connectors: Vec<String>,
}

/// The clashes among the catalogs of the live generations, `(key, catalog)`, sorted.
pub fn clashes<'a>(live: impl IntoIterator<Item = (&'a str, &'a Catalog)>) -> Vec<Clash> {
    let mut claims: BTreeMap<(&'static str, &str), BTreeSet<&str>> = BTreeMap::new();
    for (key, catalog) in live {
        for r in &catalog.resources {
            claims.entry(("resource", &r.uri)).or_default().insert(key);
        }
        for t in &catalog.templates {
            claims.entry(("template", &t.uri)).or_default().insert(key);
        }
    }
    claims
        .into_iter()
        .filter(|(_, keys)| keys.len() > 1)
        .map(|((kind, uri), keys)| Clash {
            kind,
            uri: uri.to_owned(),
            connectors: keys.into_iter().map(str::to_owned).collect(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prompt(name: &str) -> OfferedPrompt {
        OfferedPrompt {
            upstream_name: name.into(),
            definition_json: format!(r#"{{"name":"{name}"}}"#),
        }
    }

    fn resource(uri: &str) -> OfferedResource {
        OfferedResource {
            uri: uri.into(),
            definition_json: format!(r#"{{"uri":"{uri}","name":"x"}}"#),
        }
    }

    #[test]
    fn prompts_are_named_like_tools_and_sorted() {
        let offered = Offered {
            prompts: vec![prompt("simple-prompt"), prompt("a.b")],
            ..Offered::default()
        };
        let catalog = validate("everything", &offered).unwrap_or_default();
        let names: Vec<&str> = catalog
            .prompts
            .iter()
            .map(|p| p.local_name.as_str())
            .collect();
        assert_eq!(names, ["everything_a_b", "everything_simple-prompt"]);
        assert_eq!(catalog.prompts[1].upstream_name, "simple-prompt");
    }

    #[test]
    fn colliding_prompt_names_and_bad_entries_refuse_the_candidate() {
        let offered = Offered {
            prompts: vec![prompt("a.b"), prompt("a/b"), prompt("")],
            resources: vec![resource("file:///x"), resource("file:///x"), resource("")],
            templates: vec![OfferedResource {
                uri: "t://{id}".into(),
                definition_json: "[]".into(),
            }],
            ..Offered::default()
        };
        let problems = validate("k", &offered).err().unwrap_or_default();
        assert_eq!(problems.len(), 5, "{problems:?}");
        assert!(problems[0].contains("k_a_b"), "{problems:?}");
        assert!(problems.iter().any(|p| p.contains("listed twice")));
        assert!(problems.iter().any(|p| p.contains("not a JSON object")));
    }

    #[test]
    fn a_uri_two_connectors_claim_is_a_clash() {
        let one = validate(
            "a",
            &Offered {
                resources: vec![resource("file:///shared"), resource("file:///a")],
                ..Offered::default()
            },
        )
        .unwrap_or_default();
        let two = validate(
            "b",
            &Offered {
                resources: vec![resource("file:///shared")],
                ..Offered::default()
            },
        )
        .unwrap_or_default();
        let found = clashes([("a", &one), ("b", &two)]);
        assert_eq!(
            found,
            vec![Clash {
                kind: "resource",
                uri: "file:///shared".into(),
                connectors: vec!["a".into(), "b".into()],
            }]
        );
        assert!(clashes([("a", &one)]).is_empty());
    }
}
