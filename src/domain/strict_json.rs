//! Request bodies as JSON with nothing left to chance. serde_json keeps the
//! last of two equal keys (`"sensitivity":"high","sensitivity":"none"`
//! stores `none`, unsealed) and reads an integer too large for 64 bits as
//! the nearest float (rounded). A request that means two things, or a
//! number memd would store as another, is refused by name instead.

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use super::FieldError;

/// `bytes` as a JSON value, refusing duplicate keys (named by their path)
/// and integers that do not fit 64 bits.
pub fn parse(bytes: &[u8]) -> Result<Value, FieldError> {
    if let Some((literal, at)) = oversized_integer(bytes) {
        return Err(FieldError::new(
            "body",
            format!(
                "the integer {literal} (at byte {at}) does not fit 64 bits; send it as a string"
            ),
        ));
    }
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let value = Node {
        path: String::new(),
    }
    .deserialize(&mut deserializer)
    .and_then(|value| deserializer.end().map(|()| value))
    .map_err(|err| {
        let message = err.to_string();
        match message.strip_prefix(DUPLICATE) {
            Some(rest) => {
                let (path, _) = rest.split_once(" at line").unwrap_or((rest, ""));
                FieldError::new(path, "appears twice in the same object")
            }
            None => FieldError::new("body", format!("is not valid JSON: {message}")),
        }
    })?;
    Ok(value)
}

/// How the visitor's error for a repeated key starts (then its path).
const DUPLICATE: &str = "duplicate key: ";

/// A value at `path` (`events[0].content`): objects refuse a key they
/// already hold.
struct Node {
    path: String,
}

impl Node {
    fn child(&self, key: &str) -> Self {
        let path = if self.path.is_empty() {
            key.to_owned()
        } else {
            format!("{}.{key}", self.path)
        };
        Self { path }
    }
}

impl<'de> DeserializeSeed<'de> for Node {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Node {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        serde_json::Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom(format!("{}: not a finite number", self.path)))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(Node {
            path: format!("{}[{}]", self.path, items.len()),
        })? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let child = self.child(&key);
            if object.contains_key(&key) {
                return Err(de::Error::custom(format!("{DUPLICATE}{}", child.path)));
            }
            let value = map.next_value_seed(child)?;
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

/// The first integer literal of `json` (outside strings) that fits neither
/// `i64` nor `u64`, and its byte offset. Literals with a fraction or an
/// exponent are numbers the sender wrote as floats, and stay so.
fn oversized_integer(json: &[u8]) -> Option<(String, usize)> {
    let mut index = 0;
    let mut in_string = false;
    while index < json.len() {
        let byte = json[index];
        if in_string {
            match byte {
                b'\\' => index += 1,
                b'"' => in_string = false,
                _ => {}
            }
            index += 1;
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'-' | b'0'..=b'9' => {
                let start = index;
                index += 1;
                while index < json.len()
                    && matches!(json[index], b'0'..=b'9' | b'.' | b'e' | b'E' | b'+' | b'-')
                {
                    index += 1;
                }
                let literal = &json[start..index];
                let integer = !literal.iter().any(|b| matches!(b, b'.' | b'e' | b'E'));
                let text = String::from_utf8_lossy(literal);
                if integer && text.parse::<i64>().is_err() && text.parse::<u64>().is_err() {
                    return Some((text.into_owned(), start));
                }
                continue;
            }
            _ => {}
        }
        index += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_twice_is_refused_by_its_path() {
        let err = parse(br#"{"sensitivity": "high", "sensitivity": "none"}"#).unwrap_err();
        assert_eq!(err.field, "sensitivity");
        let err = parse(br#"{"events": [{"a": 1}, {"content": {"x": 1, "x": 2}}]}"#).unwrap_err();
        assert_eq!(err.field, "events[1].content.x");
        assert!(parse(br#"{"a": {"x": 1}, "b": {"x": 1}}"#).is_ok());
    }

    #[test]
    fn integers_past_64_bits_are_refused_and_floats_kept() {
        let err = parse(br#"{"n": 123456789012345678901234567890}"#).unwrap_err();
        assert_eq!(err.field, "body");
        assert!(
            err.message.contains("123456789012345678901234567890"),
            "{err}"
        );
        assert!(parse(br#"{"n": -9223372036854775808}"#).is_ok());
        assert!(parse(br#"{"n": 18446744073709551615}"#).is_ok());
        assert!(parse(br#"{"n": 1e30, "m": 1.5}"#).is_ok());
        // Digits inside strings are text.
        assert!(
            parse(br#"{"s": "123456789012345678901234567890 \" 99999999999999999999"}"#).is_ok()
        );
    }

    #[test]
    fn it_reads_what_serde_json_reads() {
        let text = br#"{"a": [1, -2, 3.5, true, null, "x"], "b": {"c": "d"}}"#;
        assert_eq!(
            parse(text).unwrap(),
            serde_json::from_slice::<Value>(text).unwrap()
        );
        assert_eq!(parse(b"{} x").unwrap_err().field, "body");
    }
}
