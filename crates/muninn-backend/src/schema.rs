//! The JSON Schema subset structured output uses, with a deterministic example generator and a
//! validator.
//!
//! Supported keywords: `type` (one name or a list; `null` is picked last), `enum`, `const`,
//! `properties`, `required`, `additionalProperties: false`, `items`, `minItems`, `maxItems`,
//! `minLength`, `maxLength`, `minimum`, `maximum`, `exclusiveMinimum`, `exclusiveMaximum`,
//! `anyOf` / `oneOf` (the first branch is generated; validation accepts any branch), `allOf`
//! (each must hold), and local `$ref`s (`#/$defs/…`, `#/definitions/…`). Other keywords are
//! ignored by both sides, so the generator's output always validates under [`validate`] for the
//! subset, and a schema that leans on unsupported keywords may produce a value the real
//! validator rejects.
//!
//! [`check_subset`] tells whether a schema stays within the subset (a schema derived from types,
//! e.g. with schemars, is checked with it before it is handed to a model).
//!
//! The generator is pure: the same schema always gives the same value. It fills every declared
//! property (required or not), strings with `"<name>-value"` padded or cut to the length bounds,
//! numbers with 42 clamped into range, booleans with `true`, arrays with `max(minItems, 1)` items
//! (capped by `maxItems`). Recursion through `$ref` stops at depth 16 with `null`.
//!
//! The work is bounded whatever the schema asks (a schema can be a client's: the simulator
//! generates tool inputs from the request's tool schemas): [`MAX_GENERATED`] units in all, one
//! per value and one per string character (a null at the depth cap and a `const` or `enum` value
//! copied from the schema included). Past the budget, strings stop growing, arrays end and values
//! come out `null`, so such a value may not validate; it is then over 2²⁰ units, and as each
//! value is at least one token and the padding one per four characters, over 262,144 tokens —
//! more than any model writes in one reply. Within it, the value validates. [`validate`] is
//! bounded likewise, at [`MAX_CHECKS`] checks, past which it refuses the value.

use serde_json::{Map, Value, json};

const MAX_DEPTH: usize = 16;

/// The most units [`generate`] spends on one value: one per value, one per string character.
pub const MAX_GENERATED: usize = 1 << 20;

/// A deterministic value valid under `schema` (see the module docs for the subset, and for the
/// bound on the work).
pub fn generate(schema: &Value) -> Value {
    let mut budget = MAX_GENERATED;
    gen_at(schema, schema, "value", 0, &mut budget)
}

fn resolve<'a>(root: &'a Value, schema: &'a Value) -> &'a Value {
    let mut current = schema;
    for _ in 0..MAX_DEPTH {
        let Some(reference) = current.get("$ref").and_then(Value::as_str) else {
            return current;
        };
        let Some(pointer) = reference.strip_prefix('#') else {
            return current;
        };
        match root.pointer(pointer) {
            Some(target) => current = target,
            None => return current,
        }
    }
    current
}

fn type_names(schema: &Value) -> Vec<&str> {
    match schema.get("type") {
        Some(Value::String(s)) => vec![s.as_str()],
        Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}

fn gen_at(root: &Value, schema: &Value, name: &str, depth: usize, budget: &mut usize) -> Value {
    // Charged before the depth cap: a null there is a value too, and a schema of many
    // properties nesting down to the cap would otherwise make them for nothing.
    if *budget == 0 {
        return Value::Null;
    }
    *budget -= 1;
    if depth > MAX_DEPTH {
        return Value::Null;
    }
    let schema = resolve(root, schema);
    if let Some(value) = gen_combined(root, schema, name, depth, budget) {
        return value;
    }
    let chosen = chosen_type(schema);
    match chosen {
        "object" => {
            let mut out = Map::new();
            if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                for (key, sub) in props {
                    out.insert(key.clone(), gen_at(root, sub, key, depth + 1, budget));
                }
            }
            Value::Object(out)
        }
        "array" => {
            let min = schema.get("minItems").and_then(Value::as_u64).unwrap_or(1);
            let max = schema
                .get("maxItems")
                .and_then(Value::as_u64)
                .unwrap_or(u64::MAX);
            let n = min.max(1).min(max);
            // Borrowed, not copied: `items` can be large, and this runs once per array made.
            let any = json!({});
            let item = schema.get("items").unwrap_or(&any);
            // As many items as the schema asks for while the budget lasts (each costs a unit,
            // so `n` itself can be anything).
            Value::Array(
                (0..n)
                    .map_while(|_| {
                        (*budget > 0).then(|| gen_at(root, item, name, depth + 1, budget))
                    })
                    .collect(),
            )
        }
        "integer" | "number" => gen_number(schema, chosen == "integer"),
        "boolean" => Value::Bool(true),
        "null" => Value::Null,
        _ => gen_string(schema, name, budget),
    }
}

/// The value a `const`, `enum`, `anyOf`/`oneOf` or `allOf` schema dictates, if it is one.
fn gen_combined(
    root: &Value,
    schema: &Value,
    name: &str,
    depth: usize,
    budget: &mut usize,
) -> Option<Value> {
    let dictated = schema.get("const").or_else(|| {
        schema
            .get("enum")
            .and_then(Value::as_array)
            .and_then(|e| e.first())
    });
    if let Some(value) = dictated {
        // A copy of the schema's value costs what generating it would.
        return Some(if charge(value, budget) {
            value.clone()
        } else {
            Value::Null
        });
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(first) = schema
            .get(key)
            .and_then(Value::as_array)
            .and_then(|b| b.first())
        {
            return Some(gen_at(root, first, name, depth + 1, budget));
        }
    }
    let all = schema.get("allOf").and_then(Value::as_array)?;
    // Merge the branches' object properties; for non-objects the first branch decides.
    let mut merged = Map::new();
    for branch in all {
        match gen_at(root, branch, name, depth + 1, budget) {
            Value::Object(m) => merged.extend(m),
            other if merged.is_empty() => return Some(other),
            _ => {}
        }
    }
    Some(Value::Object(merged))
}

/// Charges `budget` for a copy of `value` (its value itself already paid for): one unit per
/// nested value, one per string character. False, with the budget spent, if it does not fit.
fn charge(value: &Value, budget: &mut usize) -> bool {
    match value {
        Value::String(s) => spend(budget, s.chars().count()),
        Value::Array(items) => items.iter().all(|v| spend(budget, 1) && charge(v, budget)),
        Value::Object(fields) => fields
            .values()
            .all(|v| spend(budget, 1) && charge(v, budget)),
        _ => true,
    }
}

/// Takes `units` from `budget`; false, with the budget spent, if it holds fewer.
fn spend(budget: &mut usize, units: usize) -> bool {
    match budget.checked_sub(units) {
        Some(left) => {
            *budget = left;
            true
        }
        None => {
            *budget = 0;
            false
        }
    }
}

/// The type to generate: the first declared type other than `null` (`null` only when it is all
/// there is); without a `type`, what the other keywords imply.
fn chosen_type(schema: &Value) -> &str {
    let types = type_names(schema);
    types
        .iter()
        .copied()
        .find(|t| *t != "null")
        .or_else(|| types.first().copied())
        .unwrap_or(if schema.get("properties").is_some() {
            "object"
        } else if schema.get("items").is_some() {
            "array"
        } else {
            "string"
        })
}

/// 42, moved into the schema's bounds (an exclusive bound by one).
fn gen_number(schema: &Value, integer: bool) -> Value {
    let mut v: f64 = 42.0;
    if let Some(min) = schema.get("minimum").and_then(Value::as_f64) {
        v = v.max(min);
    }
    if let Some(min) = schema.get("exclusiveMinimum").and_then(Value::as_f64)
        && v <= min
    {
        v = min + 1.0;
    }
    if let Some(max) = schema.get("maximum").and_then(Value::as_f64) {
        v = v.min(max);
    }
    if let Some(max) = schema.get("exclusiveMaximum").and_then(Value::as_f64)
        && v >= max
    {
        v = max - 1.0;
    }
    if integer {
        json!(v.round() as i64)
    } else {
        json!(v)
    }
}

/// `"<name>-value"`, padded with `x` or cut to the length bounds; the padding stops where the
/// budget runs out.
fn gen_string(schema: &Value, name: &str, budget: &mut usize) -> Value {
    let mut s = format!("{name}-value");
    let min = schema
        .get("minLength")
        .and_then(Value::as_u64)
        .map_or(0, |m| usize::try_from(m).unwrap_or(usize::MAX));
    let max = schema
        .get("maxLength")
        .and_then(Value::as_u64)
        .map_or(usize::MAX, |m| usize::try_from(m).unwrap_or(usize::MAX));
    let chars = s.chars().count();
    let padding = min.saturating_sub(chars).min(*budget);
    s.extend(std::iter::repeat_n('x', padding));
    if chars + padding > max {
        s = s.chars().take(max).collect();
    }
    *budget = budget.saturating_sub(s.len());
    Value::String(s)
}

/// The keywords of the subset (see the module docs), and the annotations both sides may ignore
/// because they never change which values are valid.
const SUBSET_KEYWORDS: &[&str] = &[
    "type",
    "enum",
    "const",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "minItems",
    "maxItems",
    "minLength",
    "maxLength",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "anyOf",
    "oneOf",
    "allOf",
    "$ref",
    "$defs",
    "definitions",
    "$schema",
    "$id",
    "$comment",
    "title",
    "description",
    "default",
    "examples",
];

/// Checks that `schema` uses only the subset in the module docs (its keywords, plus the
/// annotations `$schema`, `$id`, `$comment`, `title`, `description`, `default` and `examples`),
/// with `additionalProperties` only as a boolean and `$ref`s only local (`#…`) and resolvable,
/// so that [`generate`] and [`validate`] mean what a full validator would. The error names the
/// first offending location as a JSON pointer, like `/properties/age: unsupported keyword
/// 'format'`.
pub fn check_subset(schema: &Value) -> Result<(), String> {
    subset_at(schema, schema, "")
}

fn subset_at(root: &Value, schema: &Value, at: &str) -> Result<(), String> {
    let here = if at.is_empty() { "root" } else { at };
    let object = match schema {
        Value::Object(object) => object,
        Value::Bool(_) => return Ok(()),
        _ => return Err(format!("{here}: a schema must be an object or a boolean")),
    };
    for (key, value) in object {
        if !SUBSET_KEYWORDS.contains(&key.as_str()) {
            return Err(format!("{here}: unsupported keyword '{key}'"));
        }
        let child = |name: &str| format!("{at}/{key}/{name}");
        match (key.as_str(), value) {
            ("properties" | "$defs" | "definitions", Value::Object(subs)) => {
                for (name, sub) in subs {
                    subset_at(root, sub, &child(name))?;
                }
            }
            ("anyOf" | "oneOf" | "allOf", Value::Array(subs)) => {
                for (i, sub) in subs.iter().enumerate() {
                    subset_at(root, sub, &child(&i.to_string()))?;
                }
            }
            ("items", sub) => subset_at(root, sub, &format!("{at}/items"))?,
            ("additionalProperties", Value::Bool(_)) => {}
            ("additionalProperties", _) => {
                return Err(format!("{here}: additionalProperties must be a boolean"));
            }
            ("$ref", Value::String(reference)) => {
                let resolves = reference
                    .strip_prefix('#')
                    .is_some_and(|pointer| root.pointer(pointer).is_some());
                if !resolves {
                    return Err(format!(
                        "{here}: $ref {reference:?} is not a local reference"
                    ));
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// The most checks [`validate`] makes of one value (one per value against one schema), after
/// which the value counts as refused.
pub const MAX_CHECKS: usize = 1 << 20;

/// Checks `value` against `schema` (the subset in the module docs). The error names the first
/// failing location as a JSON pointer, like `/answer: must be string`.
///
/// The work is bounded whatever the schema (a client's, in the simulator): `anyOf` branches that
/// hold the schema again multiply the checks at each level, so past [`MAX_CHECKS`] the value is
/// refused as too costly to check.
pub fn validate(schema: &Value, value: &Value) -> Result<(), String> {
    let mut budget = MAX_CHECKS;
    check(schema, schema, value, "", 0, &mut budget)
}

fn type_matches(name: &str, value: &Value) -> bool {
    match name {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        "boolean" => value.is_boolean(),
        "null" => value.is_null(),
        _ => true,
    }
}

fn check(
    root: &Value,
    schema: &Value,
    value: &Value,
    at: &str,
    depth: usize,
    budget: &mut usize,
) -> Result<(), String> {
    let here = if at.is_empty() { "root" } else { at };
    if *budget == 0 {
        return Err(format!("{here}: too costly to check"));
    }
    *budget -= 1;
    if depth > MAX_DEPTH {
        return Ok(());
    }
    let schema = resolve(root, schema);
    if let Some(c) = schema.get("const")
        && c != value
    {
        return Err(format!("{here}: must be equal to constant"));
    }
    if let Some(options) = schema.get("enum").and_then(Value::as_array)
        && !options.contains(value)
    {
        return Err(format!(
            "{here}: must be equal to one of the allowed values"
        ));
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(branches) = schema.get(key).and_then(Value::as_array)
            && !branches
                .iter()
                .any(|b| check(root, b, value, at, depth + 1, budget).is_ok())
        {
            return Err(format!("{here}: must match a schema in {key}"));
        }
    }
    if let Some(all) = schema.get("allOf").and_then(Value::as_array) {
        for branch in all {
            check(root, branch, value, at, depth + 1, budget)?;
        }
    }
    let types = type_names(schema);
    if !types.is_empty() && !types.iter().any(|t| type_matches(t, value)) {
        return Err(format!("{here}: must be {}", types.join(",")));
    }
    match value {
        Value::Object(map) => check_object(root, schema, map, at, depth, budget),
        Value::Array(items) => check_array(root, schema, items, at, depth, budget),
        Value::String(s) => check_string(schema, s, here),
        Value::Number(num) => check_number(schema, num, here),
        _ => Ok(()),
    }
}

/// `required`, each declared property, and `additionalProperties: false`.
fn check_object(
    root: &Value,
    schema: &Value,
    map: &Map<String, Value>,
    at: &str,
    depth: usize,
    budget: &mut usize,
) -> Result<(), String> {
    let here = if at.is_empty() { "root" } else { at };
    if let Some(required) = schema.get("required").and_then(Value::as_array) {
        for key in required.iter().filter_map(Value::as_str) {
            if !map.contains_key(key) {
                return Err(format!("{here}: must have required property '{key}'"));
            }
        }
    }
    let props = schema.get("properties").and_then(Value::as_object);
    for (key, v) in map {
        match props.and_then(|p| p.get(key)) {
            Some(sub) => check(root, sub, v, &format!("{at}/{key}"), depth + 1, budget)?,
            None => {
                if schema.get("additionalProperties") == Some(&Value::Bool(false)) {
                    return Err(format!("{here}: must NOT have additional property '{key}'"));
                }
            }
        }
    }
    Ok(())
}

/// `minItems`, `maxItems`, and `items` on each element.
fn check_array(
    root: &Value,
    schema: &Value,
    items: &[Value],
    at: &str,
    depth: usize,
    budget: &mut usize,
) -> Result<(), String> {
    let here = if at.is_empty() { "root" } else { at };
    let n = items.len() as u64;
    if let Some(min) = schema.get("minItems").and_then(Value::as_u64)
        && n < min
    {
        return Err(format!("{here}: must NOT have fewer than {min} items"));
    }
    if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
        && n > max
    {
        return Err(format!("{here}: must NOT have more than {max} items"));
    }
    if let Some(item) = schema.get("items") {
        for (i, v) in items.iter().enumerate() {
            check(root, item, v, &format!("{at}/{i}"), depth + 1, budget)?;
        }
    }
    Ok(())
}

/// `minimum`, `maximum`, `exclusiveMinimum` and `exclusiveMaximum`.
fn check_number(schema: &Value, num: &serde_json::Number, here: &str) -> Result<(), String> {
    let x = num.as_f64().unwrap_or(0.0);
    let bound = |k: &str| schema.get(k).and_then(Value::as_f64);
    if bound("minimum").is_some_and(|m| x < m)
        || bound("maximum").is_some_and(|m| x > m)
        || bound("exclusiveMinimum").is_some_and(|m| x <= m)
        || bound("exclusiveMaximum").is_some_and(|m| x >= m)
    {
        return Err(format!("{here}: must be within the bounds"));
    }
    Ok(())
}

/// `minLength` and `maxLength`, in characters.
fn check_string(schema: &Value, s: &str, here: &str) -> Result<(), String> {
    let n = s.chars().count() as u64;
    if schema
        .get("minLength")
        .and_then(Value::as_u64)
        .is_some_and(|m| n < m)
    {
        return Err(format!(
            "{here}: must NOT be shorter than the minimum length"
        ));
    }
    if schema
        .get("maxLength")
        .and_then(Value::as_u64)
        .is_some_and(|m| n > m)
    {
        return Err(format!(
            "{here}: must NOT be longer than the maximum length"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_values_validate() {
        let schema = json!({
            "type": "object",
            "properties": {
                "say": {"type": "array", "items": {"$ref": "#/$defs/line"}, "minItems": 2},
                "mood": {"enum": ["calm", "busy"]},
                "score": {"type": "integer", "minimum": 50, "maximum": 60},
                "ratio": {"type": "number", "exclusiveMaximum": 1},
                "ok": {"type": "boolean"},
                "note": {"type": ["string", "null"], "minLength": 20},
                "run": {"anyOf": [{"type": "null"}, {"type": "object"}]}
            },
            "required": ["say", "mood", "score"],
            "additionalProperties": false,
            "$defs": {"line": {"type": "object", "properties": {"room": {"type": "string", "maxLength": 3}, "text": {"type": "string"}}, "required": ["room", "text"]}}
        });
        let value = generate(&schema);
        assert_eq!(validate(&schema, &value), Ok(()), "{value}");
        assert_eq!(value["score"], json!(50));
        assert_eq!(value["mood"], json!("calm"));
        assert_eq!(value["say"].as_array().map(Vec::len), Some(2));
        assert_eq!(value["say"][0]["room"], json!("roo"));
    }

    #[test]
    fn the_subset_check_names_what_lies_outside() {
        let inside = json!({
            "title": "Reply", "type": "object", "additionalProperties": false,
            "properties": {"line": {"$ref": "#/$defs/line"}, "n": {"anyOf": [{"type": "null"}, {"type": "integer", "maximum": 3}]}},
            "$defs": {"line": {"type": "array", "items": {"type": "string", "minLength": 1}}}
        });
        assert_eq!(check_subset(&inside), Ok(()));
        let format = json!({"type": "object", "properties": {"age": {"type": "integer", "format": "int64"}}});
        assert_eq!(
            check_subset(&format),
            Err("/properties/age: unsupported keyword 'format'".to_string())
        );
        let nested = json!({"anyOf": [{"type": "null"}, {"items": {"pattern": "a+"}}]});
        assert_eq!(
            check_subset(&nested),
            Err("/anyOf/1/items: unsupported keyword 'pattern'".to_string())
        );
        let open = json!({"type": "object", "additionalProperties": {"type": "string"}});
        assert_eq!(
            check_subset(&open),
            Err("root: additionalProperties must be a boolean".to_string())
        );
        let remote = json!({"$ref": "https://example.com/s.json"});
        assert!(check_subset(&remote).is_err());
        let dangling = json!({"$ref": "#/$defs/missing"});
        assert!(check_subset(&dangling).is_err());
    }

    #[test]
    fn validation_names_the_failure() {
        let schema = json!({"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer", "score"]});
        assert_eq!(
            validate(&schema, &json!({"answer": "x"})),
            Err("root: must have required property 'score'".to_string())
        );
        assert_eq!(
            validate(&schema, &json!({"answer": 1, "score": 2})),
            Err("/answer: must be string".to_string())
        );
    }
}
