//! PostgreSQL's text rendering of a `jsonb` value (`value::jsonb::text`),
//! computed in memd.
//!
//! The hash chain covers content as PostgreSQL renders it, so an append
//! used to ask PostgreSQL for that text before it could hash: a round trip
//! holding the tenant's lock. Rendering it here lets an append be a single
//! statement. The statement still compares this text with PostgreSQL's own
//! rendering and stores nothing when they differ (the append then takes the
//! path that asks), so a gap in this module costs speed, never a wrong hash.
//!
//! The rules (PostgreSQL's `JsonbToCString`): object keys sorted by length,
//! then bytewise; `", "` between items and `": "` after keys; strings
//! escaped as `escape_json` does; numbers as `numeric` prints them.

use serde_json::{Map, Number, Value};

/// `value::jsonb::text`, or None for a number this module does not render
/// with certainty (the caller then asks PostgreSQL).
pub fn render(value: &Value) -> Option<String> {
    let mut out = String::new();
    write_value(&mut out, value)?;
    Some(out)
}

fn write_value(out: &mut String, value: &Value) -> Option<()> {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(number) => out.push_str(&numeric_text(number)?),
        Value::String(text) => write_string(out, text),
        Value::Array(items) => {
            out.push('[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push_str(", ");
                }
                write_value(out, item)?;
            }
            out.push(']');
        }
        Value::Object(map) => write_object(out, map)?,
    }
    Some(())
}

fn write_object(out: &mut String, map: &Map<String, Value>) -> Option<()> {
    let mut entries: Vec<(&String, &Value)> = map.iter().collect();
    entries.sort_by(|(a, _), (b, _)| {
        a.len()
            .cmp(&b.len())
            .then_with(|| a.as_bytes().cmp(b.as_bytes()))
    });
    out.push('{');
    for (index, (key, value)) in entries.into_iter().enumerate() {
        if index > 0 {
            out.push_str(", ");
        }
        write_string(out, key);
        out.push_str(": ");
        write_value(out, value)?;
    }
    out.push('}');
    Some(())
}

fn write_string(out: &mut String, text: &str) {
    out.push('"');
    for ch in text.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            control if (control as u32) < 0x20 => {
                out.push_str(&format!("\\u{:04x}", control as u32));
            }
            other => out.push(other),
        }
    }
    out.push('"');
}

/// A JSON number as PostgreSQL's `numeric` prints it after reading
/// serde_json's rendering of it: plain decimal notation, as many fraction
/// digits as the input's fraction had minus its exponent (never fewer than
/// none), no negative zero.
fn numeric_text(number: &Number) -> Option<String> {
    if number.is_i64() || number.is_u64() {
        return Some(number.to_string());
    }
    let written = number.to_string();
    let (negative, unsigned) = match written.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, written.as_str()),
    };
    let (mantissa, exponent) = match unsigned.split_once(['e', 'E']) {
        Some((mantissa, exponent)) => (mantissa, exponent.parse::<i64>().ok()?),
        None => (unsigned, 0),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if whole.is_empty() || !(whole.bytes().chain(fraction.bytes())).all(|b| b.is_ascii_digit()) {
        return None;
    }
    // Beyond this, numeric's own limits and rounding come into play.
    if exponent.abs() > 1_000 {
        return None;
    }
    let scale = (fraction.len() as i64 - exponent).max(0) as usize;
    // All digits, and where the decimal point falls among them.
    let digits: String = format!("{whole}{fraction}");
    let point = whole.len() as i64 + exponent;
    let (integer_digits, fraction_digits) = if point <= 0 {
        (String::new(), "0".repeat((-point) as usize) + &digits)
    } else if point as usize >= digits.len() {
        (
            digits.clone() + &"0".repeat(point as usize - digits.len()),
            String::new(),
        )
    } else {
        let (i, f) = digits.split_at(point as usize);
        (i.to_owned(), f.to_owned())
    };
    let integer = integer_digits.trim_start_matches('0');
    let integer = if integer.is_empty() { "0" } else { integer };
    let mut fraction_shown: String = fraction_digits.chars().take(scale).collect();
    while fraction_shown.len() < scale {
        fraction_shown.push('0');
    }
    // Digits the scale cuts off must be zeros, or numeric would round.
    if fraction_digits.chars().skip(scale).any(|d| d != '0') {
        return None;
    }
    let zero = integer == "0" && fraction_shown.bytes().all(|b| b == b'0');
    let mut text = String::new();
    if negative && !zero {
        text.push('-');
    }
    text.push_str(integer);
    if scale > 0 {
        text.push('.');
        text.push_str(&fraction_shown);
    }
    Some(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn objects_sort_keys_by_length_then_bytes() {
        let value = json!({"bb": 1, "a": [true, null], "c": {"zz": "x", "y": 2}});
        assert_eq!(
            render(&value).unwrap(),
            r#"{"a": [true, null], "c": {"y": 2, "zz": "x"}, "bb": 1}"#
        );
        assert_eq!(render(&json!({})).unwrap(), "{}");
        assert_eq!(render(&json!([])).unwrap(), "[]");
    }

    #[test]
    fn strings_escape_as_postgresql_does() {
        assert_eq!(
            render(&json!("a\"b\\c\n\t\r\u{8}\u{c}\u{1}é/")).unwrap(),
            r#""a\"b\\c\n\t\r\b\f\u0001é/""#
        );
    }

    #[test]
    fn floats_print_in_plain_notation_with_numerics_scale() {
        let cases = [
            (1.0, "1.0"),
            (0.1, "0.1"),
            (-2.5, "-2.5"),
            (1e20, "100000000000000000000"),
            (1.5e-7, "0.00000015"),
            (-0.0, "0.0"),
            (123456.789, "123456.789"),
        ];
        for (float, text) in cases {
            assert_eq!(render(&json!(float)).unwrap(), text, "{float}");
        }
    }
}
