//! Resolving one DependencyRequest, purely: the objects its references read ([`Sources`],
//! gathered by the controller) and its parsed references in, its values and failures out
//! ([`Resolution`]). The controller does the I/O on either side: gather, then write.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use serde_json::Value as Json;

use super::{Failure, Parsed, Part, Source, convert, lookup, reason, to_text};
use kraken_core_kinds::hub::{ResolvedValue, StateDeclaration, ValueReference};

/// The objects one request reads, by name, as fetched: `None` when it does not exist. An
/// object missing from its map reads as absent.
#[derive(Debug, Default, Clone)]
pub struct Sources {
    pub declarations: HashMap<String, Option<StateDeclaration>>,
    pub config_maps: HashMap<String, Option<ConfigMap>>,
    pub secrets: HashMap<String, Option<Secret>>,
}

impl Sources {
    fn secret(&self, name: &str) -> Option<&Secret> {
        self.secrets.get(name).and_then(Option::as_ref)
    }

    /// The outputs Secret to read for output `path` of declaration `declaration`, as read:
    /// only when that output is sensitive and the hub believes the declaration
    /// ([`crate::trust::vouch`]); a forged one names no Secret worth fetching.
    pub fn outputs_secret(&self, declaration: &str, path: &str) -> Option<String> {
        self.declarations
            .get(declaration)
            .and_then(Option::as_ref)
            .filter(|sd| crate::trust::vouch(sd, declaration).is_ok())
            .and_then(|sd| sensitive_secret(sd, path))
            .map(str::to_owned)
    }

    /// A Secret key's value as text; `None` when the Secret or key is missing (or not UTF-8).
    fn secret_text(&self, name: &str, key: &str) -> Option<String> {
        let s = self.secret(name)?;
        let bytes = s
            .data
            .as_ref()
            .and_then(|d| d.get(key))
            .map(|b| b.0.clone())
            .or_else(|| {
                s.string_data
                    .as_ref()
                    .and_then(|d| d.get(key))
                    .map(|v| v.clone().into_bytes())
            });
        bytes.and_then(|b| String::from_utf8(b).ok())
    }
}

/// The Secret holding the output at `path` of `sd`, when that output is sensitive (the
/// gatherer reads it too).
pub fn sensitive_secret<'a>(sd: &'a StateDeclaration, path: &str) -> Option<&'a str> {
    let first = path.split('.').next().unwrap_or_default();
    sd.spec
        .sensitive
        .as_ref()
        .filter(|s| s.keys.iter().any(|k| k == first))
        .map(|s| s.secret_name.as_str())
}

/// What one request resolved to: its values (sensitive ones apart, as JSON text by path), or
/// why not.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Resolution {
    pub values: Vec<ResolvedValue>,
    pub sensitive: BTreeMap<String, String>,
    pub failures: Vec<Failure>,
}

/// A resolved value and whether it is sensitive.
struct Got {
    value: Json,
    sensitive: bool,
}

/// Resolves every reference (parsed, or why not) against `sources` and converts each value to
/// its argument's type.
pub fn resolve(
    references: &[(&ValueReference, Result<Parsed, Failure>)],
    sources: &Sources,
) -> Resolution {
    let mut out = Resolution::default();
    let mut total = 0usize;
    for (r, p) in references {
        let got = match p {
            Err(f) => Err(f.clone()),
            Ok(p) => resolve_one(sources, &r.path, p),
        };
        // Bound what one request can make the hub hold and write.
        let got = got.and_then(|g| {
            let size = to_text(&g.value).len();
            if size > super::MAX_VALUE_BYTES {
                return Err(too_large(&r.path, "the value comes"));
            }
            total += size;
            if total > super::MAX_REQUEST_BYTES {
                Err(Failure::new(
                    reason::TOO_LARGE,
                    format!(
                        "{}: the values of this object come to more than {} KiB together",
                        r.path,
                        super::MAX_REQUEST_BYTES / 1024
                    ),
                ))
            } else {
                Ok(g)
            }
        });
        let got = got.and_then(|g| {
            let secret = g.sensitive || r.sensitive;
            convert(&g.value, r.r#type.as_ref(), secret)
                .map(|value| Got {
                    value,
                    sensitive: secret,
                })
                .map_err(|m| Failure::new(reason::TYPE_MISMATCH, format!("{}: {m}", r.path)))
        });
        match got {
            Ok(Got {
                value,
                sensitive: true,
            }) => {
                out.sensitive.insert(r.path.clone(), value.to_string());
            }
            Ok(Got { value, .. }) => out.values.push(ResolvedValue {
                path: r.path.clone(),
                value,
            }),
            Err(f) => out.failures.push(f),
        }
    }
    out
}

/// One parsed reference: a source, or a template whose first failing part fails it.
fn resolve_one(sources: &Sources, path: &str, p: &Parsed) -> Result<Got, Failure> {
    match p {
        Parsed::Single(source) => read(sources, path, source),
        Parsed::Template(parts) => {
            let mut text = String::new();
            let mut secret = false;
            for part in parts {
                match part {
                    Part::Text(t) => text.push_str(t),
                    Part::Ref(source) => {
                        let g = read(sources, path, source)?;
                        secret |= g.sensitive;
                        text.push_str(&to_text(&g.value));
                    }
                }
                if text.len() > super::MAX_VALUE_BYTES {
                    return Err(too_large(path, "the template expands"));
                }
            }
            Ok(Got {
                value: Json::String(text),
                sensitive: secret,
            })
        }
    }
}

fn too_large(path: &str, what: &str) -> Failure {
    Failure::new(
        reason::TOO_LARGE,
        format!(
            "{path}: {what} to more than {} KiB",
            super::MAX_VALUE_BYTES / 1024
        ),
    )
}

fn not_found(path: &str, what: String) -> Failure {
    Failure::new(reason::NOT_FOUND, format!("{path}: {what} not found"))
}

fn read(sources: &Sources, path: &str, source: &Source) -> Result<Got, Failure> {
    match source {
        Source::Output {
            declaration,
            path: out,
        } => read_output(sources, path, declaration, out),
        Source::ConfigMap { name, key } => {
            let cm = sources.config_maps.get(name).and_then(Option::as_ref);
            let Some(cm) = cm else {
                return Err(not_found(path, format!("ConfigMap {name}")));
            };
            match cm.data.as_ref().and_then(|d| d.get(key)) {
                Some(v) => Ok(Got {
                    value: Json::String(v.clone()),
                    sensitive: false,
                }),
                None => Err(Failure::new(
                    reason::PATH_NOT_FOUND,
                    format!("{path}: ConfigMap {name} has no key {key}"),
                )),
            }
        }
        Source::Secret { name, key } => {
            let Some(secret) = sources.secret(name) else {
                return Err(not_found(path, format!("Secret {name}")));
            };
            if let Some(why) = kraken_core_kinds::secret_off_limits(secret) {
                return Err(Failure::new(
                    kraken_kit::conditions::reason::FORBIDDEN,
                    format!("{path}: Secret {name} cannot be referenced: {why}"),
                ));
            }
            match sources.secret_text(name, key) {
                Some(v) => Ok(Got {
                    value: Json::String(v),
                    sensitive: true,
                }),
                None => Err(Failure::new(
                    reason::PATH_NOT_FOUND,
                    format!("{path}: Secret {name} has no key {key}"),
                )),
            }
        }
    }
}

/// The output `out` of StateDeclaration `declaration`, from its sensitive outputs' Secret when
/// its first segment names one of those.
fn read_output(
    sources: &Sources,
    path: &str,
    declaration: &str,
    out: &str,
) -> Result<Got, Failure> {
    let sd = sources
        .declarations
        .get(declaration)
        .and_then(Option::as_ref);
    let Some(sd) = sd else {
        return Err(not_found(
            path,
            format!(
                "StateDeclaration {declaration} (its producer does not exist or has not published outputs yet)"
            ),
        ));
    };
    super::trust::vouch(sd, declaration)?;
    let Some(secret_name) = sensitive_secret(sd, out) else {
        return match lookup(&sd.spec.outputs, out) {
            Some(v) => Ok(Got {
                value: v.clone(),
                sensitive: false,
            }),
            None => Err(Failure::new(
                reason::PATH_NOT_FOUND,
                format!(
                    "{path}: {declaration} has no output {out} (it has: {})",
                    output_names(&sd.spec.outputs)
                ),
            )),
        };
    };
    if let Some(secret) = sources.secret(secret_name) {
        super::trust::vouch_outputs(sd, declaration, secret)?;
    }
    let first = out.split('.').next().unwrap_or_default();
    let Some(text) = sources.secret_text(secret_name, first) else {
        return Err(Failure::new(
            reason::NOT_FOUND,
            format!(
                "{path}: the sensitive outputs of {declaration} (Secret {secret_name}) are missing"
            ),
        ));
    };
    let doc: Json = serde_json::from_str(&text).unwrap_or(Json::String(text));
    let v = match out.split_once('.').map(|(_, r)| r) {
        None => Some(&doc),
        Some(r) => lookup(&doc, r),
    };
    match v {
        Some(v) => Ok(Got {
            value: v.clone(),
            sensitive: true,
        }),
        None => Err(Failure::new(
            reason::PATH_NOT_FOUND,
            format!("{path}: {declaration} has no output {out}"),
        )),
    }
}

fn output_names(outputs: &Json) -> String {
    match outputs {
        Json::Object(m) if !m.is_empty() => m.keys().cloned().collect::<Vec<_>>().join(", "),
        _ => "none".into(),
    }
}

#[cfg(test)]
mod tests;
