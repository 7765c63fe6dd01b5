//! A pass over HCL text before the parser sees it, for the one shape the parser (hcl-edit
//! 0.10, the newest) takes exponential time over: brackets (or a string) opened as the operand
//! of a binary operator, nested, in text that fails to parse: on its way back the parser
//! parses each such level twice. Found by fuzzing (docs/security.md, "Fuzzing"): 800 bytes
//! of `{ s/r%{ s/r%{ ...` took seconds, 20 levels a second, 30 would take twenty minutes; text
//! that parses is linear. Real configurations nest such operands two or three deep
//! (`a * (b + (c - 1))`).
//!
//! The pass knows enough HCL to tell code from strings, heredocs and comments, so that
//! operators and brackets inside them do not count.

/// How deep brackets opened as a binary operator's operand may nest: 5. The parser's worst
/// case grows as two to this power times the text's length.
pub const MAX_OPERAND_NESTING: usize = 5;

/// Why text is refused.
pub const TOO_DEEP: &str = "brackets nested over 5 deep as operands of binary operators \
     (kraken convert's bound: the parser would take exponential time over them)";

#[derive(Clone, PartialEq)]
enum Mode {
    /// Expressions and blocks, up to the closing byte (none at the top).
    Code(Option<u8>),
    /// A quoted string.
    Quoted,
    /// A heredoc, up to the line holding only its delimiter.
    Heredoc(String),
    /// Template text with no end: a JSON string (`"${var.x}"`), read as a template.
    Template,
}

/// The most operator characters in a row (`a - - -b`, whitespace aside): past this a term's
/// unary operators nest as deep as brackets do, with the same exponential parse (the third
/// fuzzing finding, in a JSON template). Real configurations write two (`a - -1`, `!(...)`).
pub const MAX_OPERATOR_RUN: usize = 5;

/// What one byte (or a few) of text does: opens a construct, closes the innermost one, or
/// neither; and how many bytes it takes.
struct Step {
    open: Option<Mode>,
    close: bool,
    len: usize,
}

/// The line (1-based) of the first operand nested past [`MAX_OPERAND_NESTING`], if any;
/// `template`: the text is a template's (a JSON string's), not a file's.
pub fn too_deep(text: &str, template: bool) -> Option<usize> {
    let bytes = text.as_bytes();
    let first = if template {
        Mode::Template
    } else {
        Mode::Code(None)
    };
    // Each open construct, and whether it was opened as an operand.
    let mut stack: Vec<(Mode, bool)> = vec![(first, false)];
    let mut operands = 0usize;
    let (mut i, mut line, mut after_op) = (0usize, 1usize, false);
    let mut run = 0usize;
    while i < bytes.len() {
        let (mode, _) = stack.last().cloned()?;
        let step = match &mode {
            Mode::Code(end) => {
                let was = after_op;
                let step = code(&bytes[i..], *end, &mut after_op);
                // An operator right after one lengthens the run; anything else ends it.
                if after_op && step.open.is_none() && !bytes[i].is_ascii_whitespace() {
                    run = if was { run + 1 } else { 1 };
                    if run > MAX_OPERATOR_RUN {
                        return Some(line);
                    }
                } else if !after_op {
                    run = 0;
                }
                step
            }
            other => text_step(other, bytes, i),
        };
        line += bytes[i..(i + step.len.max(1)).min(bytes.len())]
            .iter()
            .filter(|b| **b == b'\n')
            .count();
        if let Some(m) = step.open {
            let operand = after_op;
            operands += usize::from(operand);
            if operands > MAX_OPERAND_NESTING {
                return Some(line);
            }
            stack.push((m, operand));
            after_op = false;
        } else if step.close && stack.len() > 1 {
            if let Some((_, operand)) = stack.pop() {
                operands -= usize::from(operand);
            }
            after_op = false;
        }
        i += step.len.max(1);
    }
    None
}

/// A step in code: comments skipped, strings, heredocs and brackets opened, `end` closing;
/// `after_op` says whether the last thing was a binary operator.
fn code(rest: &[u8], end: Option<u8>, after_op: &mut bool) -> Step {
    let c = rest[0];
    let mut step = Step {
        open: None,
        close: false,
        len: 1,
    };
    if rest.starts_with(b"#") || rest.starts_with(b"//") {
        step.len = rest.iter().position(|b| *b == b'\n').unwrap_or(rest.len());
    } else if rest.starts_with(b"/*") {
        step.len = find(rest, b"*/").map_or(rest.len(), |p| p + 2);
    } else if c == b'"' {
        step.open = Some(Mode::Quoted);
    } else if let Some((delimiter, len)) = heredoc(rest) {
        step.open = Some(Mode::Heredoc(delimiter));
        step.len = len;
    } else if let Some(end_byte) = closing(c) {
        step.open = Some(Mode::Code(Some(end_byte)));
    } else if Some(c) == end {
        step.close = true;
    } else if rest.starts_with(b"=>") {
        step.len = 2;
        *after_op = false;
    } else if b"+-*/%<>&|!".contains(&c) || rest.starts_with(b"==") {
        // Two-character operators (`!=`, `<=`, `>=`, `==`, `&&`, `||`) as one: their `=`
        // is not an assignment (the fourth finding was `a/b != {`).
        let two = [b"!=", b"<=", b">=", b"==", b"&&", b"||"];
        step.len = if two.iter().any(|t| rest.starts_with(*t)) {
            2
        } else {
            1
        };
        *after_op = true;
    } else if !c.is_ascii_whitespace() {
        *after_op = false;
    }
    step
}

/// A step in a quoted string, heredoc or template: escapes skipped, interpolations and
/// directives opened, the end closing.
fn text_step(mode: &Mode, bytes: &[u8], i: usize) -> Step {
    let (c, rest) = (bytes[i], &bytes[i..]);
    let mut step = Step {
        open: None,
        close: false,
        len: 1,
    };
    if *mode == Mode::Quoted && c == b'\\' {
        step.len = 2;
    } else if *mode == Mode::Quoted && c == b'"' {
        step.close = true;
    } else if rest.starts_with(b"$${") || rest.starts_with(b"%%{") {
        step.len = 3;
    } else if rest.starts_with(b"${") || rest.starts_with(b"%{") {
        step.open = Some(Mode::Code(Some(b'}')));
        step.len = 2;
    } else if let Mode::Heredoc(d) = mode
        && c == b'\n'
        && line_is(&bytes[i + 1..], d)
    {
        step.close = true;
    }
    step
}

/// The byte closing an opening bracket.
fn closing(c: u8) -> Option<u8> {
    match c {
        b'{' => Some(b'}'),
        b'(' => Some(b')'),
        b'[' => Some(b']'),
        _ => None,
    }
}

/// `<<EOT` or `<<-EOT` and its newline: the delimiter and the bytes up to the newline.
fn heredoc(rest: &[u8]) -> Option<(String, usize)> {
    let after = rest.strip_prefix(b"<<")?;
    let indent = usize::from(after.first() == Some(&b'-'));
    let name: Vec<u8> = after[indent..]
        .iter()
        .take_while(|b| b.is_ascii_alphanumeric() || **b == b'_' || **b == b'-')
        .copied()
        .collect();
    if name.is_empty() || after.get(indent + name.len()) != Some(&b'\n') {
        return None;
    }
    let delimiter = String::from_utf8(name).ok()?;
    Some((delimiter.clone(), 2 + indent + delimiter.len()))
}

/// Whether the line starting `rest` holds only `delimiter` (indented or not).
fn line_is(rest: &[u8], delimiter: &str) -> bool {
    let end = rest.iter().position(|b| *b == b'\n').unwrap_or(rest.len());
    rest[..end].trim_ascii() == delimiter.as_bytes()
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::too_deep;

    /// What real configurations write passes; operands nested past the bound are found at
    /// their line; operators and brackets in strings, heredocs and comments do not count.
    #[test]
    fn operands_nested_past_the_bound_are_found() {
        let cases: &[(&str, bool, Option<usize>)] = &[
            ("x = a * (b + (c - (d / (e % (f)))))\n", false, None),
            (
                "x = a * (b + (c - (d / (e % (f - (g))))))\n",
                false,
                Some(1),
            ),
            (
                "x = 1\ny = { s/r%{ s/r%{ s/r%{ s/r%{ s/r%{ s/r%{ s/r%{",
                false,
                Some(2),
            ),
            ("x = \"${a}\" == \"${b}\" && (c || !(d))\n", false, None),
            ("x = \"+(+(+(+(+(+(+(+(\"\n", false, None),
            (
                "# +(+(+(+(+(+(+(\nx = 1 /* +(+(+(+(+(+(+( */\n",
                false,
                None,
            ),
            ("x = <<EOT\n+(+(+(+(+(+(+(+(\nEOT\ny = 1\n", false, None),
            (
                "x = <<-EOT\n  ${a+(b+(c+(d+(e+(f+(g))))))}\n  EOT\n",
                false,
                Some(2),
            ),
            (
                "${ s/r%{ s/r%{ s/r%{ s/r%{ s/r%{ s/r%{ s/r%{",
                true,
                Some(1),
            ),
            ("${a + (b)} and %{ if x }y%{ endif }", true, None),
            ("x = a - -1 + !!b\n", false, None),
            (
                "x = { s/r != { s/r != { s/r != { s/r != { s/r != { s/r != {",
                false,
                Some(1),
            ),
            ("x = a <= 1 && b >= 2 || c != d\n", false, None),
            ("x = 22----source-22/2------2\n", false, Some(1)),
            ("${ce-22/222%{ if 2:22-------------222 }", true, Some(1)),
        ];
        for (text, template, want) in cases {
            assert_eq!(too_deep(text, *template), *want, "{text:?}");
        }
    }
}
