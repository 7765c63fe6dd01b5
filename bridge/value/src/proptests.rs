//! Property tests: random types, random values conforming to them, and codec round trips.

use proptest::collection::{btree_map, vec};
use proptest::prelude::*;

use super::json::{decode_json_bytes, encode_json_bytes};
use super::json_text;
use super::msgpack::{decode, encode};
use super::{Number, NumberBound, ObjectType, Refinements, Type, Value};

/// What generated values may contain.
#[derive(Debug, Clone, Copy)]
struct Opts {
    /// Unknowns (msgpack only) — and with them infinite number bounds.
    unknowns: bool,
}

fn arb_type() -> impl Strategy<Value = Type> {
    let leaf = prop_oneof![
        Just(Type::Bool),
        Just(Type::Number),
        Just(Type::String),
        Just(Type::Dynamic)
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            inner.clone().prop_map(Type::list),
            inner.clone().prop_map(Type::set),
            inner.clone().prop_map(Type::map),
            btree_map("[a-z_]{1,6}", (inner.clone(), any::<bool>()), 0..4).prop_map(|attrs| {
                let optional = attrs
                    .iter()
                    .filter(|(_, (_, opt))| *opt)
                    .map(|(k, _)| k.clone())
                    .collect();
                let attributes = attrs.into_iter().map(|(k, (t, _))| (k, t)).collect();
                Type::Object(ObjectType {
                    attributes,
                    optional,
                })
            }),
            vec(inner, 0..3).prop_map(Type::Tuple),
        ]
    })
}

fn arb_number(infinities: bool) -> BoxedStrategy<Number> {
    let finite = prop_oneof![
        any::<i64>().prop_map(Number::from_i64),
        any::<u64>().prop_map(Number::from_u64),
        any::<f64>().prop_filter_map("finite", |f| f
            .is_finite()
            .then(|| Number::from_f64(f))
            .flatten()),
        "-?[0-9]{1,25}(\\.[0-9]{1,25})?(e-?[0-9]{1,2})?"
            .prop_filter_map("valid", |s| Number::parse(&s).ok()),
    ];
    if infinities {
        prop_oneof![9 => finite, 1 => any::<bool>().prop_map(Number::infinity)].boxed()
    } else {
        finite.boxed()
    }
}

fn arb_bound() -> impl Strategy<Value = Option<NumberBound>> {
    proptest::option::of(
        (arb_number(true), any::<bool>())
            .prop_map(|(value, inclusive)| NumberBound { value, inclusive }),
    )
}

/// Refinements cty can express for `ty` (exactly what survives encoding).
fn arb_refinements(ty: &Type) -> BoxedStrategy<Refinements> {
    let base = any::<bool>().prop_map(|not_null| Refinements {
        not_null,
        ..Refinements::default()
    });
    match ty {
        Type::Dynamic => Just(Refinements::default()).boxed(),
        Type::String => (base, "(?s).{0,3}")
            .prop_map(|(r, string_prefix)| Refinements { string_prefix, ..r })
            .boxed(),
        Type::Number => (base, arb_bound(), arb_bound())
            .prop_map(|(r, number_lower, number_upper)| Refinements {
                number_lower,
                number_upper,
                ..r
            })
            .boxed(),
        Type::List(_) | Type::Set(_) | Type::Map(_) => {
            (base, 0u64..5, proptest::option::of(0u64..10))
                .prop_map(|(r, length_lower, length_upper)| Refinements {
                    length_lower,
                    length_upper,
                    ..r
                })
                .boxed()
        }
        _ => base.boxed(),
    }
}

/// A value of type `ty`, in the canonical form decoders produce.
fn arb_value(ty: &Type, opts: Opts, depth: u32) -> BoxedStrategy<Value> {
    let known = arb_known(ty, opts, depth);
    if *ty == Type::Dynamic {
        return known; // nulls and unknowns are part of the dynamic strategy
    }
    if opts.unknowns {
        prop_oneof![
            1 => Just(Value::Null),
            1 => arb_refinements(ty).prop_map(Value::Unknown),
            6 => known,
        ]
        .boxed()
    } else {
        prop_oneof![1 => Just(Value::Null), 6 => known].boxed()
    }
}

fn arb_known(ty: &Type, opts: Opts, depth: u32) -> BoxedStrategy<Value> {
    match ty {
        Type::Bool => any::<bool>().prop_map(Value::Bool).boxed(),
        Type::Number => arb_number(false).prop_map(Value::Number).boxed(),
        Type::String => "(?s).{0,8}".prop_map(Value::String).boxed(),
        Type::List(e) => vec(arb_value(e, opts, depth), 0..3)
            .prop_map(Value::List)
            .boxed(),
        Type::Set(e) => vec(arb_value(e, opts, depth), 0..3)
            .prop_map(Value::Set)
            .boxed(),
        Type::Map(e) => btree_map("(?s).{0,4}", arb_value(e, opts, depth), 0..3)
            .prop_map(Value::Map)
            .boxed(),
        Type::Object(oty) => {
            let attrs: Vec<_> = oty
                .attributes
                .iter()
                .map(|(k, t)| {
                    let k = k.clone();
                    arb_value(t, opts, depth).prop_map(move |v| (k.clone(), v))
                })
                .collect();
            attrs
                .prop_map(|attrs| Value::Object(attrs.into_iter().collect()))
                .boxed()
        }
        Type::Tuple(etys) => {
            let items: Vec<_> = etys.iter().map(|t| arb_value(t, opts, depth)).collect();
            items.prop_map(Value::Tuple).boxed()
        }
        Type::Dynamic => arb_dynamic(opts, depth),
    }
}

/// A dynamic position: null, a wholly unknown, or a value of some concrete type (nested
/// types shrink with depth so generation stays small).
fn arb_dynamic(opts: Opts, depth: u32) -> BoxedStrategy<Value> {
    let concrete = if depth >= 2 {
        prop_oneof![Just(Type::Bool), Just(Type::Number), Just(Type::String)].boxed()
    } else {
        arb_type()
            .prop_filter("concrete", |t| *t != Type::Dynamic)
            .boxed()
    };
    let typed = concrete.prop_flat_map(move |t| {
        arb_value(&t, opts, depth + 1).prop_map(move |v| v.with_dynamic_type(t.clone()))
    });
    if opts.unknowns {
        prop_oneof![1 => Just(Value::Null), 1 => Just(Value::unknown()), 4 => typed].boxed()
    } else {
        prop_oneof![1 => Just(Value::Null), 4 => typed].boxed()
    }
}

fn arb_typed_value(opts: Opts) -> impl Strategy<Value = (Type, Value)> {
    arb_type().prop_flat_map(move |t| {
        let v = arb_value(&t, opts, 0);
        (Just(t), v)
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn msgpack_round_trips((ty, value) in arb_typed_value(Opts { unknowns: true })) {
        let bytes = encode(&value, &ty).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let back = decode(&bytes, &ty).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(&back, &value);
        let again = encode(&back, &ty).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(again, bytes);
    }

    #[test]
    fn json_round_trips((ty, value) in arb_typed_value(Opts { unknowns: false })) {
        let bytes = encode_json_bytes(&value, &ty).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let back = decode_json_bytes(&bytes, &ty).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(back, value);
    }

    #[test]
    fn type_json_round_trips(ty in arb_type()) {
        let text = ty.to_json_string();
        prop_assert_eq!(Type::from_json_bytes(text.as_bytes()).ok(), Some(ty.clone()));
        prop_assert_eq!(Type::from_json(&ty.to_json()).ok(), Some(ty.clone()));
        let via_serde = serde_json::to_string(&ty.to_json()).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(via_serde, text);
    }

    #[test]
    fn numbers_reparse_to_themselves(n in arb_number(true)) {
        prop_assert_eq!(Number::parse_wire(n.as_str()).ok(), Some(n.clone()));
    }

    #[test]
    fn floats_survive_exactly(f in any::<f64>().prop_filter("finite", |f| f.is_finite())) {
        let n = Number::from_f64(f).ok_or_else(|| TestCaseError::fail("finite"))?;
        prop_assert_eq!(n.as_f64(), f);
        prop_assert_eq!(n.exact_f64(), Some(if f == 0.0 { 0.0 } else { f }));
    }

    #[test]
    fn decoders_do_not_panic_on_garbage(ty in arb_type(), bytes in vec(any::<u8>(), 0..48)) {
        let _ = decode(&bytes, &ty);
        let _ = json_text::parse(&bytes);
        let _ = decode_json_bytes(&bytes, &ty);
    }
}
