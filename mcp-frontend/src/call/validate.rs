//! Argument validation against a tool's input schema, compiled once per committed
//! generation, and the `x-mcp-header` parameters a schema declares.
//!
//! Patterns are compiled by the linear-time `regex` engine with the bounds the kernel checked
//! at commit ([`schema_pattern`]). Small arguments are checked on the request's task; larger
//! ones on a blocking thread, a few at a time, within [`CHECK_BUDGET`], so one big call never
//! holds the frontend's one thread (and every other session's calls) while it is checked.
//!
//! Error texts are built from the error *kind* only: jsonschema's own messages quote the
//! offending value, and arguments may carry secrets, so they are never used.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use jsonschema::error::{TypeKind, ValidationErrorKind};
use jsonschema::{JsonType, ValidationError, Validator};
use serde_json::Value;
use tokio::sync::Semaphore;
use tutti_rules::{mcp_header, schema_pattern};

/// At most this many lines in one `invalid_arguments` text.
const MAX_ERROR_LINES: usize = 10;
/// Schema-provided text (enum options, constants, patterns) is cut at this many characters.
const MAX_SCHEMA_TEXT: usize = 120;

/// Compiles an input schema. Only local `$ref`s resolve: nothing is fetched from the
/// network or the file system.
pub(crate) fn compile(schema: &Value) -> Result<Validator, String> {
    jsonschema::options()
        .offline()
        .with_pattern_options(
            jsonschema::PatternOptions::regex()
                .size_limit(schema_pattern::PATTERN_SIZE_LIMIT)
                .dfa_size_limit(schema_pattern::PATTERN_DFA_SIZE_LIMIT),
        )
        .build(schema)
        .map_err(|e| describe_build_error(&e))
}

/// Arguments whose strings, keys and values add up to at most this many bytes (roughly their
/// JSON size) are checked and encoded on the request's task: microseconds, no thread hop.
const INLINE_BYTES: usize = 16 * 1024;

/// Checks of larger arguments running at once (on blocking threads); more wait for a slot
/// without holding a thread.
const CONCURRENT_CHECKS: usize = 2;

/// How long the check of one call's arguments may take, its wait for a slot included. The
/// engine is linear in the arguments' size and the body is at most 4 MiB, so this is a bound
/// for a slow machine, not the usual cost (tens of milliseconds for 4 MiB).
pub(crate) const CHECK_BUDGET: Duration = Duration::from_secs(10);

/// Once this many bytes of large arguments were checked (and freed) since free memory was
/// last given back, it is given back again when no large check is running: the allocator
/// would otherwise keep a 4 MiB call's memory (measured: 24 → 75 MiB resident after one).
const RELEASE_AFTER_BYTES: usize = 1024 * 1024;

/// The slots for checks off the request's task (one per frontend, in `App`).
pub(crate) struct Checks {
    slots: Arc<Semaphore>,
    /// Bytes of large arguments freed since free memory was last released.
    unreleased: AtomicUsize,
}

impl Default for Checks {
    fn default() -> Self {
        Self {
            slots: Arc::new(Semaphore::new(CONCURRENT_CHECKS)),
            unreleased: AtomicUsize::new(0),
        }
    }
}

impl Checks {
    /// Counts `bytes` of large arguments freed; gives free memory back to the system (on a
    /// blocking thread) when enough were and no large check is running.
    fn freed(&self, bytes: usize) {
        let unreleased = self.unreleased.fetch_add(bytes, Ordering::Relaxed) + bytes;
        if unreleased >= RELEASE_AFTER_BYTES && self.slots.available_permits() == CONCURRENT_CHECKS
        {
            self.unreleased.store(0, Ordering::Relaxed);
            drop(tokio::task::spawn_blocking(
                tutti_os::memory::release_free_memory,
            ));
        }
    }
}

/// Checks `arguments` against `validator` and encodes them for the worker: `Ok` the JSON text
/// to send, `Err` the `invalid_arguments` text ([`check`]). Large arguments are checked,
/// encoded and dropped on a blocking thread ([`Checks`], [`CHECK_BUDGET`]).
pub(crate) async fn check_and_encode(
    checks: &Checks,
    validator: &Arc<Validator>,
    arguments: Value,
) -> Result<String, String> {
    let mut budget = INLINE_BYTES;
    if is_small(&arguments, &mut budget) {
        return check(validator, &arguments).map(|()| arguments.to_string());
    }
    let validator = validator.clone();
    let slots = checks.slots.clone();
    let checked = tokio::time::timeout(CHECK_BUDGET, async move {
        let permit = slots.acquire_owned().await;
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            let checked = check(&validator, &arguments).map(|()| arguments.to_string());
            (checked, approximate_size(&arguments))
        })
        .await
    })
    .await;
    match checked {
        Ok(Ok((result, size))) => {
            checks.freed(size);
            result
        }
        Ok(Err(_)) => Err("invalid_arguments: /: the arguments could not be checked".into()),
        Err(_) => Err(format!(
            "invalid_arguments: /: checking the arguments took longer than {} s; send smaller arguments",
            CHECK_BUDGET.as_secs()
        )),
    }
}

/// Roughly the JSON size of `value` in bytes (the measure [`is_small`] counts).
fn approximate_size(value: &Value) -> usize {
    match value {
        Value::String(s) => s.len() + 2,
        Value::Array(items) => 8 + items.iter().map(approximate_size).sum::<usize>(),
        Value::Object(map) => {
            8 + map
                .iter()
                .map(|(key, item)| key.len() + 3 + approximate_size(item))
                .sum::<usize>()
        }
        _ => 8,
    }
}

/// Whether `value` is within `budget` bytes of strings, keys and scalars (roughly its JSON
/// size); stops counting as soon as it is not, so the walk costs at most `budget`.
fn is_small(value: &Value, budget: &mut usize) -> bool {
    let cost = match value {
        Value::String(s) => s.len() + 2,
        _ => 8,
    };
    let Some(left) = budget.checked_sub(cost) else {
        return false;
    };
    *budget = left;
    match value {
        Value::Array(items) => items.iter().all(|item| is_small(item, budget)),
        Value::Object(map) => map.iter().all(|(key, item)| {
            budget.checked_sub(key.len() + 3).is_some_and(|left| {
                *budget = left;
                is_small(item, budget)
            })
        }),
        _ => true,
    }
}

/// `Ok(())` when `arguments` satisfies the schema; otherwise the `invalid_arguments` text
/// (one line per error, at most [`MAX_ERROR_LINES`]), which never contains argument values.
pub(crate) fn check(validator: &Validator, arguments: &Value) -> Result<(), String> {
    let mut lines = Vec::new();
    let mut more = 0usize;
    for error in validator.iter_errors(arguments) {
        if lines.len() < MAX_ERROR_LINES {
            lines.push(format!(
                "invalid_arguments: {}: {} (schema {})",
                pointer(error.instance_path().as_str()),
                describe(&error),
                pointer(error.schema_path().as_str()),
            ));
        } else {
            more += 1;
        }
    }
    if lines.is_empty() {
        return Ok(());
    }
    if more > 0 {
        lines.push(format!("invalid_arguments: and {more} more error(s)"));
    }
    Err(lines.join("\n"))
}

fn pointer(path: &str) -> &str {
    if path.is_empty() { "/" } else { path }
}

fn schema_text(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() <= MAX_SCHEMA_TEXT {
        text
    } else {
        let cut: String = text.chars().take(MAX_SCHEMA_TEXT).collect();
        format!("{cut}…")
    }
}

fn names(list: &[String]) -> String {
    let shown: Vec<String> = list
        .iter()
        .take(10)
        .map(|name| {
            let short: String = name.chars().take(64).collect();
            format!("\"{short}\"")
        })
        .collect();
    let mut text = shown.join(", ");
    if list.len() > shown.len() {
        text.push_str(&format!(" and {} more", list.len() - shown.len()));
    }
    text
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn expected_types(kind: &TypeKind) -> String {
    match kind {
        TypeKind::Single(t) => t.to_string(),
        TypeKind::Multiple(set) => {
            let all: Vec<String> = set.iter().map(|t: JsonType| t.to_string()).collect();
            all.join(" or ")
        }
    }
}

/// What failed, in words, without the instance's value. Exhaustive, so a new kind of failure
/// is a compile error here; each group of kinds is worded by its own helper.
fn describe(error: &ValidationError<'_>) -> String {
    let kind = error.kind();
    match kind {
        ValidationErrorKind::AdditionalItems { .. }
        | ValidationErrorKind::ExclusiveMaximum { .. }
        | ValidationErrorKind::ExclusiveMinimum { .. }
        | ValidationErrorKind::MaxItems { .. }
        | ValidationErrorKind::Maximum { .. }
        | ValidationErrorKind::MaxLength { .. }
        | ValidationErrorKind::MaxProperties { .. }
        | ValidationErrorKind::MinItems { .. }
        | ValidationErrorKind::Minimum { .. }
        | ValidationErrorKind::MinLength { .. }
        | ValidationErrorKind::MinProperties { .. }
        | ValidationErrorKind::MultipleOf { .. } => describe_bound(kind),
        ValidationErrorKind::Constant { .. }
        | ValidationErrorKind::ContentEncoding { .. }
        | ValidationErrorKind::ContentMediaType { .. }
        | ValidationErrorKind::Enum { .. }
        | ValidationErrorKind::Format { .. }
        | ValidationErrorKind::FromUtf8 { .. }
        | ValidationErrorKind::Pattern { .. }
        | ValidationErrorKind::Required { .. } => describe_value(kind),
        ValidationErrorKind::AdditionalProperties { unexpected } => {
            format!(
                "additional properties are not allowed ({})",
                names(unexpected)
            )
        }
        ValidationErrorKind::AnyOf { .. } => "does not match any schema of 'anyOf'".into(),
        ValidationErrorKind::BacktrackLimitExceeded { .. }
        | ValidationErrorKind::RegexEngineFailure { .. } => {
            "the pattern could not be evaluated".into()
        }
        ValidationErrorKind::Contains => "no item matches the 'contains' schema".into(),
        ValidationErrorKind::Custom { keyword, .. } => format!("fails the '{keyword}' keyword"),
        ValidationErrorKind::FalseSchema => "no value is allowed here".into(),
        ValidationErrorKind::Not { .. } => "must not match the 'not' schema".into(),
        ValidationErrorKind::OneOfMultipleValid { .. } => {
            "matches more than one schema of 'oneOf'".into()
        }
        ValidationErrorKind::OneOfNotValid { .. } => "does not match any schema of 'oneOf'".into(),
        ValidationErrorKind::PropertyNames { .. } => {
            "has a property name that is not allowed".into()
        }
        ValidationErrorKind::Type { kind } => format!(
            "must be {}, got {}",
            expected_types(kind),
            type_name(error.instance())
        ),
        ValidationErrorKind::UnevaluatedItems { unexpected } => {
            format!("has {} unevaluated item(s)", unexpected.len())
        }
        ValidationErrorKind::UnevaluatedProperties { unexpected } => {
            format!(
                "unevaluated properties are not allowed ({})",
                names(unexpected)
            )
        }
        ValidationErrorKind::UniqueItems => "items must be unique".into(),
        ValidationErrorKind::Referencing(_) => "a schema reference could not be resolved".into(),
    }
}

/// A numeric bound, or a bound on the size of an array, string or object ([`describe`]).
fn describe_bound(kind: &ValidationErrorKind) -> String {
    match kind {
        ValidationErrorKind::AdditionalItems { limit } => {
            format!("array has more than the {limit} allowed items")
        }
        ValidationErrorKind::ExclusiveMaximum { limit } => {
            format!("must be less than {}", schema_text(limit))
        }
        ValidationErrorKind::ExclusiveMinimum { limit } => {
            format!("must be greater than {}", schema_text(limit))
        }
        ValidationErrorKind::MaxItems { limit } => format!("must have at most {limit} items"),
        ValidationErrorKind::Maximum { limit } => {
            format!("must be at most {}", schema_text(limit))
        }
        ValidationErrorKind::MaxLength { limit } => {
            format!("must be at most {limit} characters long")
        }
        ValidationErrorKind::MaxProperties { limit } => {
            format!("must have at most {limit} properties")
        }
        ValidationErrorKind::MinItems { limit } => format!("must have at least {limit} items"),
        ValidationErrorKind::Minimum { limit } => {
            format!("must be at least {}", schema_text(limit))
        }
        ValidationErrorKind::MinLength { limit } => {
            format!("must be at least {limit} characters long")
        }
        ValidationErrorKind::MinProperties { limit } => {
            format!("must have at least {limit} properties")
        }
        ValidationErrorKind::MultipleOf { multiple_of } => {
            format!("must be a multiple of {multiple_of}")
        }
        // Not a bound: [`describe`] sends only the kinds above here.
        other => keyword_failed(other),
    }
}

/// A rule about the value itself: what it must equal, match, contain or be encoded as
/// ([`describe`]).
fn describe_value(kind: &ValidationErrorKind) -> String {
    match kind {
        ValidationErrorKind::Constant { expected_value } => {
            format!("must equal {}", schema_text(expected_value))
        }
        ValidationErrorKind::ContentEncoding { content_encoding } => {
            format!("is not valid \"{content_encoding}\" content")
        }
        ValidationErrorKind::ContentMediaType { content_media_type } => {
            format!("is not valid \"{content_media_type}\" content")
        }
        ValidationErrorKind::Enum { options } => {
            format!("must be one of {}", schema_text(options))
        }
        ValidationErrorKind::Format { format } => format!("is not a valid \"{format}\""),
        ValidationErrorKind::FromUtf8 { .. } => "decoded content is not valid UTF-8".into(),
        ValidationErrorKind::Pattern { pattern } => {
            format!(
                "does not match the pattern {}",
                schema_text(&Value::String(pattern.clone()))
            )
        }
        ValidationErrorKind::Required { property } => {
            format!("missing required property {}", schema_text(property))
        }
        // Not a value rule: [`describe`] sends only the kinds above here.
        other => keyword_failed(other),
    }
}

/// The generic wording: the schema keyword that failed.
fn keyword_failed(kind: &ValidationErrorKind) -> String {
    format!("fails the '{}' keyword", kind.keyword())
}

/// Why a schema did not compile (the schema is the upstream's, not a user's secret).
fn describe_build_error(error: &ValidationError<'_>) -> String {
    let rule = match error.kind() {
        ValidationErrorKind::Format { format } if format == "regex" => {
            format!(": {}", schema_pattern::PATTERN_RULE)
        }
        _ => String::new(),
    };
    format!(
        "{} at {}{rule}",
        error.kind().keyword(),
        pointer(error.schema_path().as_str())
    )
}

/// The JSON type an `x-mcp-header` parameter declares (no or another `type`: compared by
/// its JSON text).
pub(crate) use tutti_rules::mcp_header::ParamKind;

/// One `Mcp-Param-<name>` header a tool's schema declares with `x-mcp-header`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ParamHeader {
    /// The header name as declared (after `Mcp-Param-`).
    pub(crate) name: String,
    /// `mcp-param-<name>`, lowercased, for lookup.
    pub(crate) header: String,
    /// Property names from the arguments object down to the value.
    pub(crate) path: Vec<String>,
    pub(crate) kind: ParamKind,
}

/// The `x-mcp-header` declarations reachable through `properties` only
/// ([`mcp_header::declarations`], the set the kernel validated at commit).
pub(crate) fn param_headers(schema: &Value) -> Vec<ParamHeader> {
    mcp_header::declarations(schema)
        .into_iter()
        .filter_map(|declaration| {
            let name = declaration.value.as_str()?;
            Some(ParamHeader {
                name: name.to_owned(),
                header: mcp_header::header_key(name),
                path: declaration.path,
                kind: declaration.kind,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn text(schema: Value, args: Value) -> String {
        let validator = compile(&schema).expect("schema compiles");
        check(&validator, &args).expect_err("arguments are invalid")
    }

    #[test]
    fn valid_arguments_pass() {
        let v = compile(&json!({"type":"object","properties":{"a":{"type":"string"}}}))
            .expect("compiles");
        assert!(check(&v, &json!({"a":"x"})).is_ok());
    }

    #[test]
    fn type_error_names_paths_but_not_the_value() {
        let secret = "SECRET-VALUE-4711-do-not-echo";
        let t = text(
            json!({"type":"object","properties":{"count":{"type":"integer"}}}),
            json!({"count": secret}),
        );
        assert_eq!(
            t,
            "invalid_arguments: /count: must be integer, got string (schema /properties/count/type)"
        );
        assert!(!t.contains(secret));
    }

    #[test]
    fn no_kind_echoes_values() {
        let secret = "SECRET-VALUE-4711";
        let schema = json!({
            "type":"object",
            "properties":{
                "a":{"type":"string","maxLength":3},
                "b":{"type":"string","pattern":"^x$"},
                "c":{"enum":["one","two"]},
                "d":{"const":"k"},
                "e":{"type":"string","format":"email"},
                "f":{"not":{"type":"string"}},
                "g":{"anyOf":[{"type":"integer"},{"type":"boolean"}]},
                "h":{"oneOf":[{"type":"integer"},{"type":"boolean"}]},
                "i":{"type":"array","uniqueItems":true}
            },
            "required":["z"],
            "additionalProperties": false
        });
        let args = json!({
            "a":secret,"b":secret,"c":secret,"d":secret,"e":secret,"f":secret,"g":secret,
            "h":secret,"i":[secret,secret],"extra":secret
        });
        let t = text(schema, args);
        assert!(!t.contains(secret), "{t}");
        assert!(t.contains("missing required property \"z\""), "{t}");
        assert!(
            t.lines().all(|l| l.starts_with("invalid_arguments: ")),
            "{t}"
        );
    }

    #[test]
    fn root_path_is_slash() {
        let t = text(json!({"type":"object","required":["q"]}), json!({}));
        assert_eq!(
            t,
            "invalid_arguments: /: missing required property \"q\" (schema /required)"
        );
    }

    #[test]
    fn remote_refs_are_not_fetched() {
        assert!(compile(&json!({"$ref":"https://example.com/schema.json"})).is_err());
        assert!(compile(&json!({"$ref":"file:///etc/passwd"})).is_err());
        assert!(
            compile(
                &json!({"$defs":{"a":{"type":"string"}},"properties":{"x":{"$ref":"#/$defs/a"}}})
            )
            .is_ok()
        );
    }

    #[test]
    fn patterns_the_linear_engine_cannot_compile_are_refused() {
        for pattern in ["(a)\\1", "^(?=x)", "(?<!a)b", "(?:\\p{L}{1,100}){1,100}"] {
            let problem = compile(&json!({"type":"object","properties":{"a":{"pattern":pattern}}}))
                .expect_err(pattern);
            assert!(problem.contains("linear-time"), "{pattern}: {problem}");
        }
        assert!(compile(&json!({"properties":{"a":{"pattern":"^(a+)+$"}}})).is_ok());
    }

    #[test]
    fn the_size_walk_stops_at_its_budget() {
        let mut budget = 100;
        assert!(is_small(&json!({"a": "x".repeat(50)}), &mut budget));
        let mut budget = 100;
        assert!(!is_small(&json!({"a": "x".repeat(200)}), &mut budget));
        let mut budget = 100;
        assert!(!is_small(&json!(vec![1; 1000]), &mut budget));
    }

    /// Arguments over the inline size are checked (and encoded) like small ones.
    #[tokio::test]
    async fn large_arguments_are_checked_and_encoded_like_small_ones() {
        let schema = json!({"type":"object","properties":{"a":{"type":"array","items":{"pattern":"^(a+)+$"}}}});
        let validator = Arc::new(compile(&schema).expect("compiles"));
        let checks = Checks::default();
        for n in [1, 10_000] {
            let good = json!({"a": vec!["aaaa"; n]});
            let encoded = check_and_encode(&checks, &validator, good.clone()).await;
            assert_eq!(encoded, Ok(good.to_string()), "{n}");
            let mut items = vec!["aaaa"; n];
            items[n - 1] = "aaaab";
            let text = check_and_encode(&checks, &validator, json!({"a": items}))
                .await
                .expect_err("a string does not match");
            assert!(text.contains("does not match the pattern"), "{n}: {text}");
        }
    }

    #[test]
    fn header_params_are_collected_through_properties() {
        let schema = json!({"type":"object","properties":{
            "region":{"type":"string","x-mcp-header":"Region"},
            "n":{"type":"integer","x-mcp-header":"N"},
            "nested":{"type":"object","properties":{"flag":{"type":"boolean","x-mcp-header":"Flag"}}}
        }});
        let mut found = param_headers(&schema);
        found.sort_by(|a, b| a.name.cmp(&b.name));
        assert_eq!(found.len(), 3);
        assert_eq!(found[0].name, "Flag");
        assert_eq!(found[0].header, "mcp-param-flag");
        assert_eq!(found[0].path, vec!["nested".to_owned(), "flag".to_owned()]);
        assert_eq!(found[0].kind, ParamKind::Boolean);
        assert_eq!(found[1].kind, ParamKind::Integer);
        assert_eq!(found[2].kind, ParamKind::String);
    }
}
