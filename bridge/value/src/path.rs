//! Attribute paths: where inside a value something happened.
//!
//! Every codec in this module reports errors against an [`AttrPath`], and the provider
//! layer maps the attribute paths of provider diagnostics onto the same type, so a message
//! can always point at `settings.rules[2].port` rather than at "somewhere in the body".

use std::fmt;

/// One step of an [`AttrPath`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum PathStep {
    /// An object attribute (`.name`).
    Attr(String),
    /// A list, set or tuple element (`[3]`). Signed because Terraform's diagnostics carry
    /// element keys as int64.
    Index(i64),
    /// A map element (`["key"]`).
    Key(String),
}

/// A path from the root of a value to one of its parts.
///
/// Rendered the way a user would write it: attributes joined with dots, indexes in
/// brackets, map keys as quoted strings in brackets (`rules[1].tags["env"]`). The empty
/// path renders as `(root)` so messages never start with a bare colon.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct AttrPath {
    /// The steps, outermost first.
    pub steps: Vec<PathStep>,
}

impl AttrPath {
    /// The empty path, pointing at the root value.
    pub fn root() -> Self {
        Self::default()
    }

    /// Whether this is the root path.
    pub fn is_root(&self) -> bool {
        self.steps.is_empty()
    }

    /// Appends an attribute step, builder style.
    #[must_use]
    pub fn attr(mut self, name: impl Into<String>) -> Self {
        self.steps.push(PathStep::Attr(name.into()));
        self
    }

    /// Appends an index step, builder style.
    #[must_use]
    pub fn index(mut self, index: i64) -> Self {
        self.steps.push(PathStep::Index(index));
        self
    }

    /// Appends a map-key step, builder style.
    #[must_use]
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.steps.push(PathStep::Key(key.into()));
        self
    }

    /// Appends one step in place.
    pub fn push(&mut self, step: PathStep) {
        self.steps.push(step);
    }

    /// Returns `prefix` followed by this path: used to anchor a path relative to some
    /// value (e.g. `forProvider`) inside a larger document (e.g. `spec.forProvider`).
    #[must_use]
    pub fn prefixed(self, prefix: &AttrPath) -> Self {
        let mut steps = Vec::with_capacity(prefix.steps.len() + self.steps.len());
        steps.extend(prefix.steps.iter().cloned());
        steps.extend(self.steps);
        Self { steps }
    }
}

impl From<Vec<PathStep>> for AttrPath {
    fn from(steps: Vec<PathStep>) -> Self {
        Self { steps }
    }
}

impl fmt::Display for AttrPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.steps.is_empty() {
            return f.write_str("(root)");
        }
        for (i, step) in self.steps.iter().enumerate() {
            match step {
                PathStep::Attr(name) if i == 0 => f.write_str(name)?,
                PathStep::Attr(name) => write!(f, ".{name}")?,
                PathStep::Index(index) => write!(f, "[{index}]")?,
                // Debug-quoting keeps keys with dots or brackets unambiguous.
                PathStep::Key(key) => write!(f, "[{key:?}]")?,
            }
        }
        Ok(())
    }
}

/// An error message plus the path steps collected innermost-first while it bubbles up
/// through a recursive codec, so that no path is built at all on the success path.
#[derive(Debug)]
pub(crate) struct Located {
    steps_rev: Vec<PathStep>,
    message: String,
}

impl Located {
    pub(crate) fn new(message: impl Into<String>) -> Self {
        Self {
            steps_rev: Vec::new(),
            message: message.into(),
        }
    }

    /// Records that the failure happened inside `step` of the enclosing value.
    pub(crate) fn at(mut self, step: PathStep) -> Self {
        self.steps_rev.push(step);
        self
    }

    /// The outermost-first path and the message.
    pub(crate) fn into_parts(mut self) -> (AttrPath, String) {
        self.steps_rev.reverse();
        (
            AttrPath {
                steps: self.steps_rev,
            },
            self.message,
        )
    }
}

/// `result.at(|| step)`: adds a path step to a failure, building the step only then.
pub(crate) trait LocateExt<T> {
    fn at(self, step: impl FnOnce() -> PathStep) -> Result<T, Located>;
}

impl<T> LocateExt<T> for Result<T, Located> {
    fn at(self, step: impl FnOnce() -> PathStep) -> Result<T, Located> {
        self.map_err(|e| e.at(step()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_mixes_attrs_indexes_and_keys() {
        let path = AttrPath::root()
            .attr("settings")
            .attr("rules")
            .index(2)
            .attr("port");
        assert_eq!(path.to_string(), "settings.rules[2].port");
        let path = AttrPath::root().attr("tags").key("a.b");
        assert_eq!(path.to_string(), "tags[\"a.b\"]");
        assert_eq!(AttrPath::root().to_string(), "(root)");
    }

    #[test]
    fn prefixed_puts_the_prefix_first() {
        let base = AttrPath::root().attr("spec").attr("forProvider");
        let path = AttrPath::root().attr("rules").index(1).prefixed(&base);
        assert_eq!(path.to_string(), "spec.forProvider.rules[1]");
    }

    #[test]
    fn located_restores_outermost_first() {
        let failure: Result<(), Located> = Err(Located::new("boom"));
        let failure = failure
            .at(|| PathStep::Attr("port".into()))
            .at(|| PathStep::Index(0))
            .at(|| PathStep::Attr("rules".into()));
        let (path, message) = failure.expect_err("still an error").into_parts();
        assert_eq!(path.to_string(), "rules[0].port");
        assert_eq!(message, "boom");
    }
}
