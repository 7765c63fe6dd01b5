//! The blocks conversion works on, as [`super::load`] reads them: each with where it is
//! written. Apart from the reading, so that what reads files ([`super::guard`]) and what parses
//! them can both name them.

use hcl::Expression;

/// Where something is written: `file:line:column` (1-based).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Location {
    pub file: String,
    pub line: usize,
    pub column: usize,
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}:{}", self.file, self.line, self.column)
    }
}

/// A block's contents: attributes and nested blocks, in source order.
#[derive(Debug, Clone, Default)]
pub struct Body {
    pub attributes: Vec<(String, Expression, Location)>,
    pub blocks: Vec<Block>,
}

impl Body {
    pub fn attribute(&self, name: &str) -> Option<(&Expression, &Location)> {
        self.attributes
            .iter()
            .find(|(n, _, _)| n == name)
            .map(|(_, e, l)| (e, l))
    }

    pub fn blocks_of<'a>(&'a self, kind: &'a str) -> impl Iterator<Item = &'a Block> + 'a {
        self.blocks.iter().filter(move |b| b.kind == kind)
    }
}

#[derive(Debug, Clone)]
pub struct Block {
    pub kind: String,
    pub labels: Vec<String>,
    pub body: Body,
    pub at: Location,
}
