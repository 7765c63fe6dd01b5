//! IR shapes → structural OpenAPI v3 schema nodes.
//!
//! The API server only accepts *structural* schemas: every node states its `type`, except
//! nodes marked `x-kubernetes-preserve-unknown-fields` (or int-or-string); every array has
//! `items`; an object has either `properties` or `additionalProperties`, never both. Each
//! [`Shape`] renders to exactly one such node:
//!
//! | Terraform                      | schema                                                   |
//! |--------------------------------|----------------------------------------------------------|
//! | `string`                       | `type: string`                                           |
//! | `bool`                         | `type: boolean`                                          |
//! | `number`                       | `type: number` (see below)                               |
//! | `list(T)`                      | `type: array`, `items: T`                                |
//! | `set(T)`, T primitive          | `type: array`, `items: T`, `x-kubernetes-list-type: set` |
//! | `set(T)`, T structural         | `type: array`, `items: T` (atomic list)                  |
//! | `map(T)`                       | `type: object`, `additionalProperties: T`                |
//! | `object({...})`                | `type: object`, camelCased `properties`                  |
//! | `tuple([...])`, `dynamic`      | `x-kubernetes-preserve-unknown-fields: true`, no type    |
//! | block single / group           | `type: object`                                           |
//! | block list / set               | `type: array` of objects, `minItems`/`maxItems` if set   |
//! | block map                      | `type: object`, `additionalProperties` object            |
//! | sensitive argument             | `{name, key}` object, both required                      |
//!
//! A set of primitives is a `set` list so the API server refuses duplicates, as Terraform
//! would collapse them; a set of objects stays atomic because `set` lists may only hold
//! scalars or atomic items.
//!
//! # Numbers
//!
//! Terraform numbers are arbitrary-precision decimals; the schema says `type: number` with no
//! `format`. The API server decodes custom resources with Go's JSON decoder into int64 when
//! the literal is an integer that fits and float64 otherwise, so integers are exact within
//! int64 and every other number is an IEEE double. A value beyond that precision (a
//! 30-digit integer, `0.1` needing to stay decimal) must come in as a string through
//! `valuesFrom` (`template`, or a ConfigMap key), which the runtime parses as a Terraform
//! number. `integer` would refuse `1.5`, and int-or-string would lose number-ness in
//! validation, so neither is used.
//!
//! Tuples are positional with a type per element, which OpenAPI's `items` cannot say;
//! accepting any JSON and letting the runtime convert (with an error naming the path) is the
//! honest option.

use serde_json::{Map, Value as Json, json};

use crate::ir::{Node, ObjectIr, Shape};

/// The schema node for an IR node, with its description.
pub fn node_schema(node: &Node) -> Json {
    let mut schema = shape_schema(&node.shape);
    if !node.description.is_empty()
        && let Json::Object(map) = &mut schema
    {
        map.insert("description".into(), node.description.clone().into());
    }
    schema
}

fn shape_schema(shape: &Shape) -> Json {
    match shape {
        Shape::String => json!({"type": "string"}),
        Shape::Number => json!({"type": "number"}),
        Shape::Bool => json!({"type": "boolean"}),
        Shape::Any => json!({"x-kubernetes-preserve-unknown-fields": true}),
        Shape::Array {
            items,
            set_of_scalars,
            min_items,
            max_items,
        } => {
            let mut map = Map::new();
            map.insert("type".into(), "array".into());
            map.insert("items".into(), node_schema(items));
            if *set_of_scalars {
                map.insert("x-kubernetes-list-type".into(), "set".into());
            }
            if *min_items > 0 {
                map.insert("minItems".into(), (*min_items).into());
            }
            if *max_items > 0 {
                map.insert("maxItems".into(), (*max_items).into());
            }
            Json::Object(map)
        }
        Shape::Map(values) => {
            json!({"type": "object", "additionalProperties": node_schema(values)})
        }
        Shape::Object(object) => object_schema(object, true),
        Shape::SecretRef => secret_ref_schema(),
    }
}

/// An object node. `with_required` is false for `forProvider`, whose required arguments are
/// checked by CEL so that `valuesFrom` can supply them.
pub fn object_schema(object: &ObjectIr, with_required: bool) -> Json {
    let mut map = Map::new();
    map.insert("type".into(), "object".into());
    if !object.fields.is_empty() {
        let properties = object
            .fields
            .iter()
            .map(|f| (f.name.clone(), node_schema(&f.node)))
            .collect();
        map.insert("properties".into(), Json::Object(properties));
    }
    let required: Vec<Json> = object
        .fields
        .iter()
        .filter(|f| f.required)
        .map(|f| f.name.clone().into())
        .collect();
    if with_required && !required.is_empty() {
        map.insert("required".into(), Json::Array(required));
    }
    Json::Object(map)
}

/// `{name, key}`: a key of a Secret in the resource's namespace.
pub fn secret_ref_schema() -> Json {
    json!({
        "type": "object",
        "required": ["name", "key"],
        "properties": {
            "name": {"type": "string", "minLength": 1,
                     "description": "Name of the Secret, in the resource's namespace."},
            "key": {"type": "string", "minLength": 1,
                    "description": "Key of the value in the Secret's data."},
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cty::Type;
    use crate::ir::{Field, type_shape};

    fn node(shape: Shape) -> Node {
        Node {
            description: String::new(),
            shape,
        }
    }

    #[test]
    fn cty_types_map_to_structural_nodes() {
        let obj = Type::object([("foo_bar", Type::Number), ("x", Type::Dynamic)]);
        let cases = [
            (Type::String, json!({"type": "string"})),
            (Type::Bool, json!({"type": "boolean"})),
            (Type::Number, json!({"type": "number"})),
            (
                Type::Dynamic,
                json!({"x-kubernetes-preserve-unknown-fields": true}),
            ),
            (
                Type::Tuple(vec![Type::String, Type::Number]),
                json!({"x-kubernetes-preserve-unknown-fields": true}),
            ),
            (
                Type::list(Type::String),
                json!({"type": "array", "items": {"type": "string"}}),
            ),
            (
                Type::set(Type::Number),
                json!({"type": "array", "items": {"type": "number"},
                       "x-kubernetes-list-type": "set"}),
            ),
            (
                Type::set(Type::list(Type::String)),
                json!({"type": "array", "items": {"type": "array", "items": {"type": "string"}}}),
            ),
            (
                Type::map(Type::Bool),
                json!({"type": "object", "additionalProperties": {"type": "boolean"}}),
            ),
            (
                obj.clone(),
                json!({"type": "object", "properties": {
                    "fooBar": {"type": "number"},
                    "x": {"x-kubernetes-preserve-unknown-fields": true}}}),
            ),
            (
                Type::set(obj),
                json!({"type": "array", "items": {"type": "object", "properties": {
                    "fooBar": {"type": "number"},
                    "x": {"x-kubernetes-preserve-unknown-fields": true}}}}),
            ),
        ];
        for (ty, want) in cases {
            assert_eq!(node_schema(&node(type_shape(&ty))), want, "{ty}");
        }
    }

    /// Numbers are plain `type: number`: no `format` (which would make the API server
    /// round-trip through a fixed width) and never `integer` (which would refuse `1.5`).
    #[test]
    fn numbers_are_untyped_json_numbers() {
        let schema = node_schema(&node(Shape::Number));
        assert_eq!(schema, json!({"type": "number"}));
        assert!(schema.get("format").is_none());
    }

    #[test]
    fn arrays_carry_item_counts_and_objects_their_required_fields() {
        let field = |name: &str, required| Field {
            name: name.into(),
            tf_name: name.into(),
            node: node(Shape::String),
            required,
        };
        let object = ObjectIr {
            fields: vec![field("port", true), field("protocol", false)],
        };
        let shape = Shape::Array {
            items: Box::new(node(Shape::Object(object.clone()))),
            set_of_scalars: false,
            min_items: 1,
            max_items: 3,
        };
        let got = node_schema(&Node {
            description: "Rules.".into(),
            shape,
        });
        assert_eq!(
            got,
            json!({"type": "array", "minItems": 1, "maxItems": 3, "description": "Rules.",
                   "items": {"type": "object", "required": ["port"], "properties": {
                       "port": {"type": "string"}, "protocol": {"type": "string"}}}})
        );
        assert!(object_schema(&object, false).get("required").is_none());
    }
}
