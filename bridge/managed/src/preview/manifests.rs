//! The documents `kraken plan -f` reads: files and directories (`.yaml`, `.yml`, `.json`, in
//! name order, not recursive, as `kubectl apply -f DIR` reads them), multi-document YAML split,
//! `List` kinds unwrapped, empty documents skipped.

use std::path::{Path, PathBuf};

use serde::Deserialize as _;
use serde_json::Value as Json;

/// One document and where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Manifest {
    /// `file#n`: the n-th document of the file, from 1.
    pub origin: String,
    pub doc: Json,
}

/// Why the manifests could not be read; each names the file.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not valid YAML or JSON: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("{origin} is not a Kubernetes object: {why}")]
    NotAnObject { origin: String, why: String },
    #[error("{0} holds no manifests (.yaml, .yml or .json files)")]
    Empty(PathBuf),
}

/// Every document of `paths` (files or directories), in order.
pub fn read_all(paths: &[PathBuf]) -> Result<Vec<Manifest>, ManifestError> {
    let mut out = Vec::new();
    for path in paths {
        let files = files_of(path)?;
        if files.is_empty() {
            return Err(ManifestError::Empty(path.clone()));
        }
        for file in files {
            let text = std::fs::read_to_string(&file).map_err(|source| ManifestError::Read {
                path: file.clone(),
                source,
            })?;
            out.extend(parse(&file, &text)?);
        }
    }
    Ok(out)
}

/// The manifest files `path` names: itself, or a directory's manifest files in name order.
fn files_of(path: &Path) -> Result<Vec<PathBuf>, ManifestError> {
    let read = |source| ManifestError::Read {
        path: path.to_owned(),
        source,
    };
    let meta = std::fs::metadata(path).map_err(read)?;
    if !meta.is_dir() {
        return Ok(vec![path.to_owned()]);
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(read)?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.is_file()
                && p.extension()
                    .and_then(|e| e.to_str())
                    .is_some_and(|e| matches!(e, "yaml" | "yml" | "json"))
        })
        .collect();
    files.sort();
    Ok(files)
}

/// The documents of one file's text.
pub fn parse(file: &Path, text: &str) -> Result<Vec<Manifest>, ManifestError> {
    let mut out = Vec::new();
    let mut n = 0;
    for de in yaml_serde::Deserializer::from_str(text) {
        let doc = Json::deserialize(de).map_err(|e| ManifestError::Parse {
            path: file.to_owned(),
            message: e.to_string(),
        })?;
        if doc.is_null() {
            continue;
        }
        n += 1;
        let origin = format!("{}#{n}", file.display());
        if !doc.is_object() {
            return Err(ManifestError::NotAnObject {
                origin,
                why: "the document is not a mapping".to_owned(),
            });
        }
        // `kubectl get -o yaml` of several objects: a List of them.
        if doc.get("kind").and_then(Json::as_str) == Some("List")
            && let Some(items) = doc.get("items").and_then(Json::as_array)
        {
            for (i, item) in items.iter().enumerate() {
                out.push(Manifest {
                    origin: format!("{origin}.items[{i}]"),
                    doc: item.clone(),
                });
            }
            continue;
        }
        out.push(Manifest { origin, doc });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_documents_skips_empty_ones_and_unwraps_lists() {
        let text = "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n# only a comment\n---\n\
                    {\"apiVersion\": \"v1\", \"kind\": \"List\", \"items\": [{\"kind\": \"Secret\"}]}\n";
        let docs = parse(Path::new("m.yaml"), text).expect("parses");
        let origins: Vec<&str> = docs.iter().map(|m| m.origin.as_str()).collect();
        assert_eq!(origins, ["m.yaml#1", "m.yaml#2.items[0]"]);
        assert_eq!(docs[0].doc["metadata"]["name"], "a");
        assert_eq!(docs[1].doc["kind"], "Secret");
    }

    #[test]
    fn text_that_is_not_yaml_names_the_file() {
        let err = parse(Path::new("bad.yaml"), "a: [unclosed\n").expect_err("refused");
        assert!(
            err.to_string().starts_with("bad.yaml is not valid YAML"),
            "{err}"
        );
        let err = parse(Path::new("s.yaml"), "just a string\n").expect_err("refused");
        assert!(
            err.to_string()
                .contains("s.yaml#1 is not a Kubernetes object"),
            "{err}"
        );
    }
}
