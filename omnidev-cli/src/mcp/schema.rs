//! The tools' JSON Schemas as any client reads them, and the arguments
//! checked against them: the schema is the one owner of each argument's
//! type and range.

use serde_json::{Map, Value};

/// `schema` as plain JSON Schema 2020-12: without `format` (schemars'
/// `uint32`, `int32`, … are no standard format, and a strict validator
/// refuses an unknown one); in an input schema (`input`), an optional
/// argument is optional by its absence from `required` alone, so its
/// `null` type and `default: null` go (a client that sends `null` has it
/// refused as of the wrong type).
pub fn plain(schema: &mut Map<String, Value>, input: bool) {
    if schema.get("format").is_some_and(Value::is_string) {
        schema.remove("format");
    }
    if input {
        if schema.get("default") == Some(&Value::Null) {
            schema.remove("default");
        }
        if let Some(Value::Array(types)) = schema.get_mut("type") {
            types.retain(|t| t != "null");
            if types.len() == 1 {
                let only = types.remove(0);
                schema.insert("type".to_owned(), only);
            }
        }
    }
    for (keyword, value) in schema.iter_mut() {
        match (keyword.as_str(), value) {
            // Values, not schemas.
            ("const" | "default" | "enum" | "examples" | "required", _) => {}
            // Maps of names to schemas (a property may be named `format`).
            ("properties" | "$defs" | "patternProperties", Value::Object(named)) => {
                for sub in named.values_mut() {
                    if let Value::Object(sub) = sub {
                        plain(sub, input);
                    }
                }
            }
            (_, Value::Object(sub)) => plain(sub, input),
            (_, Value::Array(subs)) => {
                for sub in subs {
                    if let Value::Object(sub) = sub {
                        plain(sub, input);
                    }
                }
            }
            _ => {}
        }
    }
}

/// Checks a tool's `arguments` against its input `schema` (as [`plain`]
/// left it). An integer or a boolean given as a string that holds one
/// (`"3"`, `"true"`) is taken as that value: clients that pass every
/// argument as text (the MCP Inspector's CLI, `key=value`) send numbers
/// so, and the text is not ambiguous. Any other argument of the wrong type,
/// a number out of its range, or more items than allowed is refused with
/// what it is, what it got and what it must be. Unknown arguments are left
/// to the tool, which refuses them.
pub fn check(
    schema: &Map<String, Value>,
    arguments: &mut Map<String, Value>,
) -> Result<(), String> {
    let Some(Value::Object(properties)) = schema.get("properties") else {
        return Ok(());
    };
    for (name, value) in arguments.iter_mut() {
        let Some(Value::Object(property)) = properties.get(name) else {
            continue;
        };
        let number = |key: &str| property.get(key).and_then(Value::as_f64);
        let want = property.get("type").and_then(Value::as_str).unwrap_or("");
        if let Value::String(text) = value {
            let text = text.trim();
            let lenient = match want {
                "integer" => text.parse::<u64>().map(Value::from).ok(),
                "boolean" => text.parse::<bool>().map(Value::from).ok(),
                _ => None,
            };
            if let Some(lenient) = lenient {
                *value = lenient;
            }
        }
        let items = property.get("items").and_then(|i| i.get("type")).and_then(Value::as_str);
        let fits = match (want, &*value) {
            ("array", Value::Array(list)) => {
                items.is_none_or(|t| list.iter().all(|i| is(t, i)))
                    && property
                        .get("maxItems")
                        .and_then(Value::as_u64)
                        .is_none_or(|max| list.len() as u64 <= max)
            }
            (t, v) => is(t, v),
        };
        let in_range = value.as_f64().is_none_or(|n| {
            number("minimum").is_none_or(|min| n >= min)
                && number("maximum").is_none_or(|max| n <= max)
        });
        if fits && in_range {
            continue;
        }
        let must = match (want, number("minimum"), number("maximum"), number("maxItems")) {
            ("integer", Some(min), Some(max), _) => format!("an integer between {min} and {max}"),
            ("array", _, _, Some(max)) => {
                format!("an array of at most {max} {}s", items.unwrap_or("item"))
            }
            ("array", _, _, None) => format!("an array of {}s", items.unwrap_or("item")),
            (t, _, _, _) => format!("a {t}"),
        };
        let got = value.to_string();
        let got = omnidev_core::text::clip(&got, 80);
        return Err(format!("`{name}` is {got}; it must be {must}"));
    }
    Ok(())
}

/// Whether `value` is of the JSON Schema type `kind` (any, for a type
/// this module does not know).
fn is(kind: &str, value: &Value) -> bool {
    match kind {
        "integer" => value.is_u64() || value.is_i64(),
        "boolean" => value.is_boolean(),
        "string" => value.is_string(),
        "array" => value.is_array(),
        "object" => value.is_object(),
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn checked(arguments: Value) -> Result<Value, String> {
        let schema = json!({"type": "object", "properties": {
            "lines": {"type": "integer", "minimum": 1, "maximum": 5000},
            "since_reload": {"type": "boolean"},
            "services": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
        }});
        let Value::Object(mut arguments) = arguments else {
            panic!("an object");
        };
        check(schema.as_object().expect("object"), &mut arguments).map(|()| arguments.into())
    }

    #[test]
    fn numbers_and_booleans_given_as_text_are_taken() {
        assert_eq!(
            checked(json!({"lines": " 3", "since_reload": "true", "other": "x"})),
            Ok(json!({"lines": 3, "since_reload": true, "other": "x"}))
        );
    }

    #[test]
    fn a_wrong_type_or_range_names_the_argument_what_it_got_and_the_range() {
        let range = "it must be an integer between 1 and 5000";
        for (arguments, said) in [
            (json!({"lines": 0}), format!("`lines` is 0; {range}")),
            (json!({"lines": 5001}), format!("`lines` is 5001; {range}")),
            (json!({"lines": 4_294_967_296_u64}), format!("`lines` is 4294967296; {range}")),
            (json!({"lines": "3x"}), format!("`lines` is \"3x\"; {range}")),
            (json!({"lines": 2.5}), format!("`lines` is 2.5; {range}")),
            (json!({"lines": null}), format!("`lines` is null; {range}")),
            (
                json!({"since_reload": "yes"}),
                "`since_reload` is \"yes\"; it must be a boolean".to_owned(),
            ),
            (
                json!({"services": "db"}),
                "`services` is \"db\"; it must be an array of at most 2 strings".to_owned(),
            ),
            (
                json!({"services": ["a", 1]}),
                "`services` is [\"a\",1]; it must be an array of at most 2 strings".to_owned(),
            ),
            (
                json!({"services": ["a", "b", "c"]}),
                "`services` is [\"a\",\"b\",\"c\"]; it must be an array of at most 2 strings"
                    .to_owned(),
            ),
        ] {
            assert_eq!(checked(arguments), Err(said));
        }
        let long = checked(json!({"since_reload": "é".repeat(100)})).expect_err("refused");
        assert!(long.chars().count() < 140 && long.contains('…'), "{long}");
    }

    #[test]
    fn plain_drops_formats_and_null_types_of_inputs_only() {
        let mut schema = json!({"properties": {
            "format": {"type": ["integer", "null"], "format": "uint32", "default": null},
            "list": {"items": {"format": "int64", "type": "integer"}},
        }});
        let mut output = schema.clone();
        plain(schema.as_object_mut().expect("object"), true);
        assert_eq!(
            schema,
            json!({"properties": {
                "format": {"type": "integer"},
                "list": {"items": {"type": "integer"}},
            }})
        );
        plain(output.as_object_mut().expect("object"), false);
        assert_eq!(
            output["properties"]["format"],
            json!({"type": ["integer", "null"], "default": null})
        );
    }
}
