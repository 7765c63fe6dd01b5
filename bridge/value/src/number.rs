//! Terraform numbers: arbitrary precision, kept as canonical decimal text.
//!
//! Terraform (cty) numbers are big floats: HCL literals and strings parse at 512 bits of
//! mantissa, and values that came from a float64 stay that exact binary value. On the
//! plugin wire msgpack carries a number as an int64/uint64 when it is an integer that
//! fits, as a float64 when the float is exactly the number, and otherwise as a decimal
//! string; JSON carries the number's text.
//!
//! [`Number`] stores the *exact* value as canonical decimal text (no exponent, no leading
//! zeros, no trailing fractional zeros, no `-0`). Every float64 is a finite binary
//! fraction and so has an exact, terminating decimal expansion: [`Number::from_f64`]
//! keeps that expansion (`0.1f64` becomes `0.1000000000000000055511151231257827021181583404541015625`),
//! while [`Number::parse`] keeps decimal text as written (`"0.1"` stays `0.1`). That
//! mirrors cty's own distinction between a float that came off the wire and a decimal the
//! user typed, and it makes every codec lossless: the float re-encodes as the same
//! float64, the decimal as the same string.
//!
//! cty numbers can also be infinite (unbounded refinements say "between -Inf and +Inf");
//! those are stored as `+Inf`/`-Inf`, the text Go's `big.Float` prints for them.

use std::fmt;
use std::str::FromStr;

/// The longest canonical text accepted. Exact float64 expansions need at most ~1100
/// characters; the cap keeps inputs like `1e999999999` from allocating gigabytes.
const MAX_TEXT_LEN: usize = 4096;

const POS_INF: &str = "+Inf";
const NEG_INF: &str = "-Inf";

/// Why text is not a number.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NumberError {
    /// The text is not decimal number syntax.
    #[error("invalid number syntax {0:?}")]
    Syntax(String),
    /// The number needs more than the supported number of digits.
    #[error("number {0:?} needs too many digits to represent exactly")]
    TooLong(String),
}

/// An arbitrary-precision Terraform number; see the module docs for the representation.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Number {
    text: String,
}

impl Number {
    /// Zero.
    pub fn zero() -> Self {
        Self {
            text: "0".to_owned(),
        }
    }

    /// Positive (`true`) or negative infinity.
    pub fn infinity(positive: bool) -> Self {
        let text = if positive { POS_INF } else { NEG_INF };
        Self {
            text: text.to_owned(),
        }
    }

    /// An exact integer.
    pub fn from_i64(n: i64) -> Self {
        Self {
            text: n.to_string(),
        }
    }

    /// An exact unsigned integer.
    pub fn from_u64(n: u64) -> Self {
        Self {
            text: n.to_string(),
        }
    }

    /// The exact value of a float: its full binary expansion, not the shortest decimal
    /// that rounds to it. Infinities are kept; NaN has no Terraform meaning (`None`).
    pub fn from_f64(f: f64) -> Option<Self> {
        if f.is_nan() {
            return None;
        }
        if f.is_infinite() {
            return Some(Self::infinity(f > 0.0));
        }
        if f == 0.0 {
            return Some(Self::zero());
        }
        let bits = f.to_bits();
        let biased_exp = i64::try_from((bits >> 52) & 0x7ff).unwrap_or(0);
        let fraction = bits & ((1u64 << 52) - 1);
        let (mantissa, exp2) = if biased_exp == 0 {
            (fraction, -1074)
        } else {
            (fraction | (1u64 << 52), biased_exp - 1075)
        };
        // value = mantissa * 2^exp2; with the mantissa made odd, a negative exponent is
        // exactly the number of fractional decimal digits of the expansion.
        let exp2 = exp2 + i64::from(mantissa.trailing_zeros());
        let digits = usize::try_from(-exp2).unwrap_or(0);
        // Rust's precision formatting of floats is exact, so this prints the expansion.
        let text = format!("{f:.digits$}");
        Some(Self { text })
    }

    /// Parses decimal text: optional sign, digits with an optional fraction (`5`, `5.`,
    /// `.5`), optional exponent (`1e3`, `2.5E-2`). The result is canonical.
    pub fn parse(s: &str) -> Result<Self, NumberError> {
        let parts = split_decimal(s).ok_or_else(|| NumberError::Syntax(clip(s)))?;
        render(&parts).ok_or_else(|| NumberError::TooLong(clip(s)))
    }

    /// Parses what a Terraform msgpack or JSON peer may send for a number: decimal text,
    /// or the infinities as Go prints them (`+Inf`, `-Inf`, `Inf`).
    pub(crate) fn parse_wire(s: &str) -> Result<Self, NumberError> {
        match s {
            "+Inf" | "Inf" | "+inf" | "inf" => Ok(Self::infinity(true)),
            "-Inf" | "-inf" => Ok(Self::infinity(false)),
            _ => Self::parse(s),
        }
    }

    /// The canonical text (`+Inf`/`-Inf` for the infinities).
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether this is one of the infinities.
    pub fn is_infinite(&self) -> bool {
        self.text == POS_INF || self.text == NEG_INF
    }

    /// Whether the number is a finite integer.
    pub fn is_integer(&self) -> bool {
        !self.is_infinite() && !self.text.contains('.')
    }

    /// The value as an `i64`, if it is an integer in range.
    pub fn as_i64(&self) -> Option<i64> {
        if self.is_integer() {
            self.text.parse().ok()
        } else {
            None
        }
    }

    /// The value as a `u64`, if it is a non-negative integer in range.
    pub fn as_u64(&self) -> Option<u64> {
        if self.is_integer() {
            self.text.parse().ok()
        } else {
            None
        }
    }

    /// The nearest `f64` (correctly rounded; out-of-range magnitudes become infinite).
    pub fn as_f64(&self) -> f64 {
        match self.text.as_str() {
            POS_INF => f64::INFINITY,
            NEG_INF => f64::NEG_INFINITY,
            text => text.parse().unwrap_or(f64::NAN),
        }
    }

    /// The `f64` that is *exactly* this number, if there is one. This is the test cty
    /// applies before putting a float64 on the wire.
    pub fn exact_f64(&self) -> Option<f64> {
        if self.is_infinite() {
            return Some(self.as_f64());
        }
        // Every binary fraction's decimal expansion ends in 5: a cheap early exit for the
        // common decimal inputs such as 0.1.
        if self.text.contains('.') && !self.text.ends_with('5') {
            return None;
        }
        let f = self.as_f64();
        if !f.is_finite() {
            return None;
        }
        let exact = Self::from_f64(f)?;
        (exact.text == self.text).then_some(f)
    }
}

impl fmt::Debug for Number {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Number({})", self.text)
    }
}

impl fmt::Display for Number {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl FromStr for Number {
    type Err = NumberError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl From<i64> for Number {
    fn from(n: i64) -> Self {
        Self::from_i64(n)
    }
}

impl From<u64> for Number {
    fn from(n: u64) -> Self {
        Self::from_u64(n)
    }
}

/// A decimal split into sign, significant digits and a power of ten:
/// value = digits × 10^exp10.
struct DecimalParts<'a> {
    negative: bool,
    int_digits: &'a [u8],
    frac_digits: &'a [u8],
    exp10: i64,
}

fn split_decimal(s: &str) -> Option<DecimalParts<'_>> {
    let bytes = s.as_bytes();
    let (negative, rest) = match bytes.first()? {
        b'-' => (true, &bytes[1..]),
        b'+' => (false, &bytes[1..]),
        _ => (false, bytes),
    };
    let int_len = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    let (int_digits, mut rest) = rest.split_at(int_len);
    let mut frac_digits: &[u8] = &[];
    if let Some((b'.', after)) = rest.split_first() {
        let frac_len = after.iter().take_while(|b| b.is_ascii_digit()).count();
        (frac_digits, rest) = after.split_at(frac_len);
    }
    if int_digits.is_empty() && frac_digits.is_empty() {
        return None;
    }
    let mut exp10: i64 = 0;
    if let Some((b'e' | b'E', after)) = rest.split_first() {
        let (exp_negative, digits) = match after.split_first() {
            Some((b'-', d)) => (true, d),
            Some((b'+', d)) => (false, d),
            _ => (false, after),
        };
        if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
            return None;
        }
        // Saturate: anything this large is rejected as too long later (unless zero).
        for d in digits {
            exp10 = exp10.saturating_mul(10).saturating_add(i64::from(d - b'0'));
        }
        exp10 = exp10.min(i64::from(u32::MAX));
        if exp_negative {
            exp10 = -exp10;
        }
        rest = &[];
    }
    rest.is_empty().then_some(DecimalParts {
        negative,
        int_digits,
        frac_digits,
        exp10,
    })
}

fn render(parts: &DecimalParts<'_>) -> Option<Number> {
    let mut digits: Vec<u8> = Vec::with_capacity(parts.int_digits.len() + parts.frac_digits.len());
    digits.extend(parts.int_digits.iter().skip_while(|&&b| b == b'0'));
    if digits.is_empty() {
        digits.extend(parts.frac_digits.iter().skip_while(|&&b| b == b'0'));
    } else {
        digits.extend_from_slice(parts.frac_digits);
    }
    let frac_len = i64::try_from(parts.frac_digits.len()).ok()?;
    let mut exp10 = parts.exp10 - frac_len;
    while digits.last() == Some(&b'0') {
        digits.pop();
        exp10 += 1;
    }
    if digits.is_empty() {
        return Some(Number::zero());
    }
    let n = i64::try_from(digits.len()).ok()?;
    let point = n + exp10; // digits before the decimal point
    let len = if exp10 >= 0 {
        point
    } else if point > 0 {
        n + 1
    } else {
        n + 2 - point
    };
    if usize::try_from(len).ok()? > MAX_TEXT_LEN {
        return None;
    }
    let mut text = String::with_capacity(usize::try_from(len).ok()? + 1);
    if parts.negative {
        text.push('-');
    }
    let digits = String::from_utf8(digits).ok()?;
    if exp10 >= 0 {
        text.push_str(&digits);
        text.extend(std::iter::repeat_n('0', usize::try_from(exp10).ok()?));
    } else if point > 0 {
        let (int_part, frac_part) = digits.split_at(usize::try_from(point).ok()?);
        text.push_str(int_part);
        text.push('.');
        text.push_str(frac_part);
    } else {
        text.push_str("0.");
        text.extend(std::iter::repeat_n('0', usize::try_from(-point).ok()?));
        text.push_str(&digits);
    }
    Some(Number { text })
}

/// Shortens user input quoted in an error message.
fn clip(s: &str) -> String {
    match s.char_indices().nth(64) {
        Some((end, _)) => format!("{}…", &s[..end]),
        None => s.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canon(s: &str) -> String {
        Number::parse(s)
            .map(|n| n.to_string())
            .unwrap_or_else(|e| format!("error: {e}"))
    }

    #[test]
    fn parse_canonicalizes() {
        let cases = [
            ("0", "0"),
            ("-0", "0"),
            ("-0.000", "0"),
            ("007", "7"),
            ("+5", "5"),
            ("5.", "5"),
            (".5", "0.5"),
            ("1.2500", "1.25"),
            ("-12.340e1", "-123.4"),
            ("1e3", "1000"),
            ("1E+3", "1000"),
            ("25e-3", "0.025"),
            ("0.000e99999999999999999999", "0"),
            (
                "123456789012345678901234567890",
                "123456789012345678901234567890",
            ),
            ("100", "100"),
            ("0.10", "0.1"),
        ];
        for (input, want) in cases {
            assert_eq!(canon(input), want, "parsing {input:?}");
        }
    }

    #[test]
    fn parse_rejects_bad_syntax_and_huge_numbers() {
        for bad in [
            "", "-", ".", "e5", "1e", "1e+", "1.2.3", "0x10", "1_000", " 1", "1 ", "NaN", "abc",
        ] {
            assert!(
                matches!(Number::parse(bad), Err(NumberError::Syntax(_))),
                "{bad:?}"
            );
        }
        assert!(matches!(
            Number::parse("1e999999"),
            Err(NumberError::TooLong(_))
        ));
        assert!(matches!(
            Number::parse("1e-99999"),
            Err(NumberError::TooLong(_))
        ));
    }

    #[test]
    fn from_f64_is_the_exact_expansion() {
        let cases = [
            (
                0.1,
                "0.1000000000000000055511151231257827021181583404541015625",
            ),
            (0.5, "0.5"),
            (-2.25, "-2.25"),
            (-0.0, "0"),
            (1e21, "1000000000000000000000"),
            (9007199254740993.0, "9007199254740992"),
        ];
        for (f, want) in cases {
            assert_eq!(
                Number::from_f64(f).map(|n| n.to_string()).as_deref(),
                Some(want)
            );
        }
        assert_eq!(Number::from_f64(f64::NAN), None);
        assert_eq!(
            Number::from_f64(f64::INFINITY)
                .map(|n| n.to_string())
                .as_deref(),
            Some("+Inf")
        );
        let tiny = Number::from_f64(f64::from_bits(1)).expect("subnormal");
        assert!(tiny.as_str().starts_with("0.000"));
        assert_eq!(tiny.as_f64(), f64::from_bits(1));
        let huge = Number::from_f64(f64::MAX).expect("max");
        assert_eq!(huge.as_str().len(), 309);
        assert_eq!(huge.as_f64(), f64::MAX);
    }

    #[test]
    fn exact_f64_only_for_exact_binary_values() {
        let exact = Number::from_f64(0.1).expect("finite");
        assert_eq!(exact.exact_f64(), Some(0.1));
        assert_eq!(Number::parse("0.1").expect("valid").exact_f64(), None);
        assert_eq!(
            Number::parse("0.75").expect("valid").exact_f64(),
            Some(0.75)
        );
        assert_eq!(
            Number::parse("9223372036854775808")
                .expect("valid")
                .exact_f64(),
            Some(9.223372036854776e18)
        );
        assert_eq!(
            Number::parse("18446744073709551615")
                .expect("valid")
                .exact_f64(),
            None
        );
        assert_eq!(Number::infinity(false).exact_f64(), Some(f64::NEG_INFINITY));
    }

    #[test]
    fn integer_accessors() {
        let n = Number::from_i64(i64::MIN);
        assert_eq!(n.as_i64(), Some(i64::MIN));
        assert!(n.is_integer());
        let big = Number::from_u64(u64::MAX);
        assert_eq!(big.as_i64(), None);
        assert_eq!(big.as_u64(), Some(u64::MAX));
        let frac = Number::parse("1.5").expect("valid");
        assert!(!frac.is_integer());
        assert_eq!(frac.as_i64(), None);
        assert_eq!(frac.as_f64(), 1.5);
        assert!(!Number::infinity(true).is_integer());
    }

    #[test]
    fn wire_parse_accepts_go_infinities() {
        assert_eq!(Number::parse_wire("+Inf"), Ok(Number::infinity(true)));
        assert_eq!(Number::parse_wire("-Inf"), Ok(Number::infinity(false)));
        assert!(Number::parse("+Inf").is_err());
    }
}
