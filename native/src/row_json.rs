//! A row image written straight as the changelog's JSON text: the text the Delta output would
//! store for the canonical dict (`orjson.dumps(row)`, outputs/delta.py), byte for byte, built
//! without a Python object per value (issue 13: the 30-column capture is bound by the GIL).
//!
//! Anything this module does not write exactly as orjson would (a JSON value with an integer
//! beyond 64 bits, NaN, a lone surrogate, ...) is an `Err`, and the caller decodes that event
//! into dicts instead.

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

/// `s` as a JSON string, escaped as orjson escapes it: the two-character forms for `"`, `\`,
/// `\n`, `\r`, `\t`, `\b`, `\f`; `\u00xx` (lower-case hex) for other control characters;
/// everything else (DEL, non-ASCII) as it is.
pub(crate) fn push_str(out: &mut String, s: &str) {
    out.push('"');
    let bytes = s.as_bytes();
    // Most values need no escape: one pass the compiler vectorises, then a single copy.
    if !bytes.iter().any(|&b| b < 0x20 || b == b'"' || b == b'\\') {
        out.push_str(s);
        out.push('"');
        return;
    }
    let mut from = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let esc: &str = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0x08 => "\\b",
            0x0c => "\\f",
            0..=0x1f => "",
            _ => continue,
        };
        out.push_str(&s[from..i]);
        if esc.is_empty() {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.push_str("\\u00");
            out.push(HEX[(b >> 4) as usize] as char);
            out.push(HEX[(b & 15) as usize] as char);
        } else {
            out.push_str(esc);
        }
        from = i + 1;
    }
    out.push_str(&s[from..]);
    out.push('"');
}

/// A float as orjson writes it: the shortest digits that read back as `v` (of two equally
/// close, the even one: a float32 widened to a double often ends on such a tie, -12.6887359619140625
/// is "-12.688735961914062", where Rust's `{:e}` writes ...063), positional for decimal
/// exponents -5..15 (with ".0" for whole numbers), otherwise `d.ddde+x` / `d.ddde-x`; NaN and
/// the infinities as null. zmij (serde_json's writer) writes exactly that; the unit tests
/// compare it with orjson on random doubles and float32s.
pub(crate) fn push_float(out: &mut String, v: f64) {
    if !v.is_finite() {
        out.push_str("null");
        return;
    }
    out.push_str(zmij::Buffer::new().format_finite(v));
}

/// The canonical value of a JSON column (what `json.loads(text)` gives) written as orjson
/// writes it: compact, keys in their first place with their last value, numbers as Python
/// reads them. Err for what json.loads reads differently from serde_json or orjson cannot
/// write: integers beyond 64 bits and -0 (serde_json reads them as floats), NaN/Infinity,
/// lone surrogates, nesting deeper than 128.
pub(crate) fn push_json_text(out: &mut String, text: &str) -> Result<(), String> {
    if odd_integer(text.as_bytes()) {
        return Err("a JSON integer beyond 64 bits, or -0".into());
    }
    // Written while it is read; an object with a key twice (Python keeps the first place and
    // the last value) or any error goes through a parsed tree, which also names the error.
    let mark = out.len();
    let mut de = serde_json::Deserializer::from_str(text);
    if Compact(out).deserialize(&mut de).and_then(|()| de.end()).is_ok() {
        return Ok(());
    }
    out.truncate(mark);
    let value: Value = serde_json::from_str(text).map_err(|e| format!("a JSON value serde_json refuses ({e})"))?;
    push_value(out, &value)
}

/// Whether `s` has an integer literal serde_json reads unlike Python: `-0` (a float -0.0
/// there), or one beyond 64 bits (a run of 19 or more digits that is no fraction or exponent
/// and fits neither i64 nor u64). Digits in a string count too, which only costs the fallback.
fn odd_integer(s: &[u8]) -> bool {
    let mut i = 0;
    while i < s.len() {
        if !s[i].is_ascii_digit() {
            i += 1;
            continue;
        }
        let start = i;
        while i < s.len() && s[i].is_ascii_digit() {
            i += 1;
        }
        let before = if start > 0 { s[start - 1] } else { b' ' };
        let after = s.get(i).copied().unwrap_or(b' ');
        let integer = !matches!(before, b'.' | b'e' | b'E' | b'+') && !matches!(after, b'.' | b'e' | b'E');
        if integer && before == b'-' && &s[start..i] == b"0" {
            return true; // -0: Python's int 0, serde_json's float -0.0
        }
        if integer && i - start >= 19 {
            // serde_json reads what fits an i64 or a u64 as an integer, the rest as a float.
            let digits = std::str::from_utf8(&s[start..i]).expect("ASCII digits");
            let fits = if before == b'-' {
                format!("-{digits}").parse::<i64>().is_ok()
            } else {
                digits.parse::<u64>().is_ok()
            };
            if !fits {
                return true;
            }
        }
    }
    false
}

/// A JSON value written compact as it is read (no tree); Err on a key seen twice in one object.
struct Compact<'a>(&'a mut String);

impl<'de> DeserializeSeed<'de> for Compact<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Compact<'_> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        self.0.push_str("null");
        Ok(())
    }
    fn visit_bool<E>(self, v: bool) -> Result<(), E> {
        self.0.push_str(if v { "true" } else { "false" });
        Ok(())
    }
    fn visit_i64<E>(self, v: i64) -> Result<(), E> {
        crate::push_int(self.0, v);
        Ok(())
    }
    fn visit_u64<E>(self, v: u64) -> Result<(), E> {
        crate::push_digits(self.0, v, 0);
        Ok(())
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<(), E> {
        if !v.is_finite() {
            return Err(E::custom("a JSON number beyond the float range"));
        }
        push_float(self.0, v);
        Ok(())
    }
    fn visit_str<E>(self, v: &str) -> Result<(), E> {
        push_str(self.0, v);
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let out = self.0;
        out.push('[');
        let mut first = true;
        loop {
            let mark = out.len();
            if !first {
                out.push(',');
            }
            if seq.next_element_seed(Compact(&mut *out))?.is_none() {
                out.truncate(mark);
                break;
            }
            first = false;
        }
        out.push(']');
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let out = self.0;
        out.push('{');
        let mut keys: Vec<(usize, usize)> = Vec::new(); // where each key's text is in `out`
        loop {
            let mark = out.len();
            if !keys.is_empty() {
                out.push(',');
            }
            let start = out.len();
            if map.next_key_seed(Compact(&mut *out))?.is_none() {
                out.truncate(mark);
                break;
            }
            let end = out.len();
            if keys.iter().any(|&(s, e)| out[s..e] == out[start..end]) {
                return Err(de::Error::custom("a key twice in one object"));
            }
            keys.push((start, end));
            out.push(':');
            map.next_value_seed(Compact(&mut *out))?;
        }
        out.push('}');
        Ok(())
    }
}

fn push_value(out: &mut String, v: &Value) -> Result<(), String> {
    // serde_json reads at most 128 levels (orjson writes up to 255): deeper is an Err.
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => {
            // odd_integer: an integer literal here fits 64 bits and was read as one.
            if let Some(i) = n.as_i64() {
                crate::push_int(out, i);
            } else if let Some(u) = n.as_u64() {
                crate::push_digits(out, u, 0);
            } else {
                push_float(out, n.as_f64().ok_or("a JSON number beyond the float range")?);
            }
        }
        Value::String(s) => push_str(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                push_value(out, item)?;
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            for (i, (k, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                push_str(out, k);
                out.push(':');
                push_value(out, item)?;
            }
            out.push('}');
        }
    }
    Ok(())
}
