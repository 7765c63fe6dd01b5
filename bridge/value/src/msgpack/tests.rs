//! Golden vectors derived by hand from the msgpack spec and cty's encoder.

use std::collections::BTreeMap;

use super::{decode, encode};
use crate::{Number, NumberBound, Refinements, Type, Value};

fn ty(json: &str) -> Type {
    Type::from_json_bytes(json.as_bytes()).expect("valid type json")
}

/// Encodes, checks the bytes, and checks they decode back to the value.
fn golden(value: &Value, t: &Type, want: &[u8]) {
    let got = encode(value, t).expect("encodes");
    assert_eq!(got, want, "encoding {value:?}");
    assert_eq!(
        decode(&got, t).expect("decodes"),
        *value,
        "decoding {want:02x?}"
    );
}

#[test]
fn object_with_null_attribute() {
    let t = ty(r#"["object",{"a":"string","b":"number"}]"#);
    let v = Value::object([("a", Value::string("x")), ("b", Value::Null)]);
    golden(&v, &t, &[0x82, 0xa1, b'a', 0xa1, b'x', 0xa1, b'b', 0xc0]);
    // Absent attributes encode as nil and decode as explicit nulls.
    let sparse = Value::object([("a", Value::string("x"))]);
    assert_eq!(
        encode(&sparse, &t).expect("encodes"),
        encode(&v, &t).expect("encodes")
    );
}

#[test]
fn unknowns() {
    golden(&Value::unknown(), &Type::String, &[0xd4, 0x00, 0x00]);
    golden(&Value::unknown(), &Type::Dynamic, &[0xd4, 0x00, 0x00]);
    // Any extension type and size decodes as a plain unknown.
    for bytes in [
        &[0xd4, 0x05, 0x00][..],
        &[0xc7, 0x00, 0x00],
        &[0xd6, 0x03, 1, 2, 3, 4],
    ] {
        assert_eq!(
            decode(bytes, &Type::Number).expect("decodes"),
            Value::unknown()
        );
    }
}

#[test]
fn refined_unknowns() {
    let not_null = Value::Unknown(Refinements {
        not_null: true,
        ..Refinements::default()
    });
    // ext8 len 3, type 12, payload {1: false}
    golden(
        &not_null,
        &Type::Bool,
        &[0xc7, 0x03, 0x0c, 0x81, 0x01, 0xc2],
    );

    let prefix = Value::Unknown(Refinements {
        not_null: true,
        string_prefix: "abc".into(),
        ..Default::default()
    });
    // Exactly 8 payload bytes: fixext8.
    golden(
        &prefix,
        &Type::String,
        &[0xd7, 0x0c, 0x82, 0x01, 0xc2, 0x02, 0xa3, b'a', b'b', b'c'],
    );

    let bounded = Value::Unknown(Refinements {
        not_null: true,
        number_lower: Some(NumberBound {
            value: Number::infinity(false),
            inclusive: false,
        }),
        number_upper: Some(NumberBound {
            value: Number::from_i64(10),
            inclusive: true,
        }),
        ..Default::default()
    });
    let mut want = vec![0xc7, 0x13, 0x0c, 0x83, 0x01, 0xc2, 0x03, 0x92, 0xcb];
    want.extend_from_slice(&f64::NEG_INFINITY.to_be_bytes());
    want.extend_from_slice(&[0xc2, 0x04, 0x92, 0x0a, 0xc3]);
    golden(&bounded, &Type::Number, &want);

    let lengths = Value::Unknown(Refinements {
        length_lower: 1,
        length_upper: Some(3),
        ..Default::default()
    });
    golden(
        &lengths,
        &Type::list(Type::String),
        &[0xc7, 0x05, 0x0c, 0x82, 0x05, 0x01, 0x06, 0x03],
    );
}

#[test]
fn refinements_that_do_not_apply_are_dropped_or_ignored() {
    let prefix = Value::Unknown(Refinements {
        string_prefix: "ab".into(),
        ..Default::default()
    });
    assert_eq!(
        encode(&prefix, &Type::Number).expect("encodes"),
        [0xd4, 0, 0]
    );
    assert_eq!(
        encode(&prefix, &Type::Dynamic).expect("encodes"),
        [0xd4, 0, 0]
    );
    // A string prefix sent for a number, plus an unknown key 9: both skipped.
    let truncated = [0xc7, 0x08, 0x0c, 0x82, 0x02, 0xa1, b'a'];
    assert!(
        decode(&truncated, &Type::Number).is_err(),
        "truncated payload must fail"
    );
    let bytes = [0xc7, 0x06, 0x0c, 0x82, 0x02, 0xa1, b'a', 0x09, 0xc0];
    assert_eq!(
        decode(&bytes, &Type::Number).expect("decodes"),
        Value::unknown()
    );
    // Definitely-null is null; refinements at a dynamic position are ignored.
    assert_eq!(
        decode(&[0xc7, 0x03, 0x0c, 0x81, 0x01, 0xc3], &Type::Bool).expect("decodes"),
        Value::Null
    );
    assert_eq!(
        decode(&[0xc7, 0x03, 0x0c, 0x81, 0x01, 0xc2], &Type::Dynamic).expect("decodes"),
        Value::unknown()
    );
}

#[test]
fn dynamic_values_carry_their_type() {
    // ["\"string\"" as bin8, "x"]
    let mut want = vec![0x92, 0xc4, 0x08];
    want.extend_from_slice(br#""string""#);
    want.extend_from_slice(&[0xa1, b'x']);
    golden(&Value::string("x"), &Type::Dynamic, &want);
    // The type may also arrive as a msgpack string.
    let mut as_str = vec![0x92, 0xa8];
    as_str.extend_from_slice(br#""string""#);
    as_str.extend_from_slice(&[0xa1, b'x']);
    assert_eq!(
        decode(&as_str, &Type::Dynamic).expect("decodes"),
        Value::string("x")
    );
    golden(&Value::Null, &Type::Dynamic, &[0xc0]);
}

#[test]
fn dynamic_values_whose_type_is_not_implied_are_typed() {
    let typed_null = Value::Typed(Type::String, Box::new(Value::Null));
    let mut want = vec![0x92, 0xc4, 0x08];
    want.extend_from_slice(br#""string""#);
    want.push(0xc0);
    golden(&typed_null, &Type::Dynamic, &want);

    let empty_strings = Value::Typed(Type::list(Type::String), Box::new(Value::List(vec![])));
    let mut want = vec![0x92, 0xc4, 0x11];
    want.extend_from_slice(br#"["list","string"]"#);
    want.push(0x90);
    golden(&empty_strings, &Type::Dynamic, &want);

    let implied = Value::List(vec![]);
    let mut want = vec![0x92, 0xc4, 0x12];
    want.extend_from_slice(br#"["list","dynamic"]"#);
    want.push(0x90);
    golden(&implied, &Type::Dynamic, &want);
}

#[test]
fn nested_dynamic_inside_object() {
    let t = ty(r#"["object",{"d":"dynamic","n":"number"}]"#);
    let v = Value::object([
        ("d", Value::object([("k", Value::Bool(true))])),
        ("n", Value::Number(Number::parse("0.1").expect("valid"))),
    ]);
    let mut want = vec![0x82, 0xa1, b'd', 0x92, 0xc4, 0x17];
    want.extend_from_slice(br#"["object",{"k":"bool"}]"#);
    want.extend_from_slice(&[0x81, 0xa1, b'k', 0xc3, 0xa1, b'n', 0xa3, b'0', b'.', b'1']);
    golden(&v, &t, &want);
}

#[test]
fn numbers_choose_int_then_float_then_string() {
    golden(&Value::int(5), &Type::Number, &[0x05]);
    golden(&Value::int(-1), &Type::Number, &[0xff]);
    golden(&Value::int(300), &Type::Number, &[0xcd, 0x01, 0x2c]);
    let half = Value::Number(Number::parse("1.5").expect("valid"));
    let mut want = vec![0xcb];
    want.extend_from_slice(&1.5f64.to_be_bytes());
    golden(&half, &Type::Number, &want);
    let point_one = Value::Number(Number::from_f64(0.1).expect("finite"));
    let mut want = vec![0xcb];
    want.extend_from_slice(&0.1f64.to_be_bytes());
    golden(&point_one, &Type::Number, &want);
    let big = Value::Number(Number::parse("18446744073709551617").expect("valid"));
    let mut want = vec![0xb4];
    want.extend_from_slice(b"18446744073709551617");
    golden(&big, &Type::Number, &want);
    // Foreign encodings: uint64, float32, numeric strings in any spelling.
    let u = decode(
        &[0xcf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
        &Type::Number,
    );
    assert_eq!(
        u.expect("decodes"),
        Value::Number(Number::from_u64(u64::MAX))
    );
    assert_eq!(
        decode(&[0xca, 0x3f, 0xc0, 0, 0], &Type::Number).expect("decodes"),
        half
    );
    assert_eq!(
        decode(&[0xa3, b'1', b'e', b'2'], &Type::Number).expect("decodes"),
        Value::int(100)
    );
}

#[test]
fn collections() {
    let t = Type::set(Type::String);
    golden(
        &Value::Set(vec![Value::string("b"), Value::string("a")]),
        &t,
        &[0x92, 0xa1, b'b', 0xa1, b'a'],
    );
    let t = Type::map(Type::Bool);
    let m: BTreeMap<String, Value> = [
        ("z".to_owned(), Value::Bool(false)),
        ("a".to_owned(), Value::Null),
    ]
    .into();
    golden(
        &Value::Map(m),
        &t,
        &[0x82, 0xa1, b'a', 0xc0, 0xa1, b'z', 0xc2],
    );
    let t = Type::Tuple(vec![Type::String, Type::Number]);
    golden(
        &Value::Tuple(vec![Value::string("a"), Value::int(1)]),
        &t,
        &[0x92, 0xa1, b'a', 0x01],
    );
    golden(&Value::Null, &Type::list(Type::String), &[0xc0]);
}

#[test]
fn decode_errors_name_the_path() {
    let t =
        ty(r#"["object",{"settings":["object",{"rules":["list",["object",{"port":"number"}]]}]}]"#);
    let rule = |port: &[u8]| {
        let mut b = vec![0x81, 0xa4];
        b.extend_from_slice(b"port");
        b.extend_from_slice(port);
        b
    };
    let mut bytes = vec![0x81, 0xa8];
    bytes.extend_from_slice(b"settings");
    bytes.extend_from_slice(&[0x81, 0xa5]);
    bytes.extend_from_slice(b"rules");
    bytes.push(0x93);
    bytes.extend(rule(&[0x01]));
    bytes.extend(rule(&[0x02]));
    bytes.extend(rule(&[0xa1, b'x']));
    let err = decode(&bytes, &t).expect_err("string where a number belongs");
    assert_eq!(
        err.to_string(),
        "at settings.rules[2].port: expected number: invalid number syntax \"x\""
    );
    let err = decode(
        &[0x81, 0xa1, b'q', 0xc0],
        &ty(r#"["object",{"a":"string"}]"#),
    )
    .expect_err("unknown attr");
    assert_eq!(err.to_string(), "at q: unsupported attribute");
    let err = decode(&[0xc3], &Type::Number).expect_err("bool for number");
    assert_eq!(err.to_string(), "at (root): expected number, found bool");
    let err = decode(&[0x92, 0x01], &Type::list(Type::Number)).expect_err("truncated");
    assert_eq!(err.to_string(), "at [1]: unexpected end of msgpack data");
    assert!(
        decode(&[0x01, 0x02], &Type::Number).is_err(),
        "trailing bytes"
    );
    assert!(
        decode(&[0xdd, 0xff, 0xff, 0xff, 0xff], &Type::list(Type::Bool)).is_err(),
        "huge claimed length"
    );
}

#[test]
fn encode_errors_name_the_path() {
    let t = ty(r#"["object",{"rules":["list",["object",{"port":"number"}]]}]"#);
    let v = Value::object([(
        "rules",
        Value::List(vec![Value::object([("port", Value::string("80"))])]),
    )]);
    let err = encode(&v, &t).expect_err("string for number");
    assert_eq!(
        err.to_string(),
        "cannot encode value at rules[0].port: expected number, found string"
    );
    let extra = Value::object([("rules", Value::Null), ("nope", Value::Null)]);
    assert_eq!(
        encode(&extra, &t).expect_err("extra").path.to_string(),
        "nope"
    );
    let mixed = Value::List(vec![Value::int(1), Value::string("x")]);
    assert!(encode(&mixed, &Type::Dynamic).is_err());
}
