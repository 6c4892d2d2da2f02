//! Makes the rows of a MySQL/MariaDB chunk SELECT (text protocol) canonical, straight from
//! the row packets PyMySQL read (sources/mysql/select_native.py hands them over), as
//! `from_select` would make them from PyMySQL's converted values
//! (airflow_provider_dblog/sources/mysql/values.py).
//!
//! Each row packet is one length-coded string per column (0xFB: NULL). What this does not
//! reproduce exactly (a value of unexpected shape) raises `Unsupported`, and the chunk is
//! converted by PyMySQL and `from_select` instead.

use crate::values::{push_key_json, PyCtx, Val};
use crate::{days_in_month, row_json, Unsupported};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString};
use std::borrow::Cow;

// Column kinds (mysql_select_native.TEXT_KINDS has the same list, in this order).
const INT: u8 = 0;
const DECIMAL: u8 = 1;
const DOUBLE: u8 = 2;
const FLOAT: u8 = 3;
const TEXT: u8 = 4; // text and enum: the UTF-8 text
const BINARY: u8 = 5;
const BIT: u8 = 6;
const YEAR: u8 = 7;
const DATE: u8 = 8;
const DATETIME: u8 = 9;
const TIMESTAMP: u8 = 10;
const JSON: u8 = 11;

type U<T> = Result<T, String>;

#[pyclass(frozen, module = "airflow_provider_dblog._rows_native")]
pub struct MyTextPlan {
    names: Vec<Py<PyString>>,
    name_json: Vec<String>, // `"name":` per column (row_text)
    kinds: Vec<u8>,
    ctx: PyCtx,           // the values' Python side (crate::values)
    template: Py<PyDict>, // crate::row_template
}

#[pymethods]
impl MyTextPlan {
    #[new]
    fn new(py: Python<'_>, names: Vec<String>, kinds: Vec<u8>) -> PyResult<Self> {
        if names.len() != kinds.len() || kinds.iter().any(|&k| k > JSON) {
            return Err(pyo3::exceptions::PyValueError::new_err(
                "one known kind per column name",
            ));
        }
        let name_json = names
            .iter()
            .map(|n| {
                let mut j = String::new();
                row_json::push_str(&mut j, n);
                j.push(':');
                j
            })
            .collect();
        let names: Vec<Py<PyString>> = names.iter().map(|n| PyString::intern(py, n).unbind()).collect();
        Ok(MyTextPlan {
            name_json,
            template: crate::row_template(py, &names)?,
            names,
            kinds,
            ctx: PyCtx::new(py)?,
        })
    }

    /// The row packets' payloads (bytes) as {name: canonical value} dicts.
    fn rows<'py>(&self, py: Python<'py>, packets: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyList>> {
        let out = PyList::empty(py);
        for p in packets.try_iter()? {
            let p = p?;
            let data = p.downcast::<PyBytes>()?.as_bytes();
            out.append(self.row(py, data).map_err(Unsupported::new_err)?)?;
        }
        Ok(out)
    }
}

impl MyTextPlan {
    fn row<'py>(&self, py: Python<'py>, d: &[u8]) -> U<Bound<'py, PyDict>> {
        let dict = self.template.bind(py).copy().map_err(|e| e.to_string())?;
        let mut pos = 0usize;
        for c in 0..self.kinds.len() {
            let value = match field(d, &mut pos).ok_or("a row packet shorter than its columns")? {
                None => py.None().into_bound(py),
                Some(raw) => self.value(py, c, raw)?,
            };
            dict.set_item(self.names[c].bind(py), value)
                .map_err(|e| e.to_string())?;
        }
        if pos != d.len() {
            return Err("a row packet longer than its columns".into());
        }
        Ok(dict)
    }

    /// A value's text checked and read by its column's kind.
    fn parse<'a>(&self, c: usize, raw: &'a [u8]) -> U<Val<'a>> {
        let bad = |what: &str| format!("column {c}: {what}");
        let text = || std::str::from_utf8(raw).map_err(|_| bad("text that is not UTF-8"));
        Ok(match self.kinds[c] {
            INT => {
                let t = text()?;
                match t.parse::<i64>() {
                    Ok(v) => Val::Int(v),
                    Err(_) => Val::UInt(t.parse::<u64>().map_err(|_| bad("no integer"))?),
                }
            }
            DECIMAL => {
                let t = text()?;
                let digits = t.strip_prefix('-').unwrap_or(t);
                let (whole, frac) = digits.split_once('.').unwrap_or((digits, "0"));
                let plain = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
                if !plain(whole) || !plain(frac) || (whole.len() > 1 && whole.starts_with('0')) {
                    return Err(bad("a DECIMAL not in plain form"));
                }
                Val::Str(t)
            }
            DOUBLE | FLOAT => {
                let v: f64 = text()?.parse().map_err(|_| bad("no number"))?;
                if !v.is_finite() {
                    return Err(bad("a number that is not finite"));
                }
                // FLOAT arrives as CAST(col AS DOUBLE) (mysql_values.select_expression): the
                // stored float32's exact value, kept as it is, like the binlog decoder's.
                Val::Float(v)
            }
            TEXT => Val::Str(text()?),
            BINARY => Val::Bytes(Cow::Borrowed(raw)),
            BIT => {
                if raw.len() > 8 {
                    return Err(bad("a BIT wider than 64"));
                }
                Val::UInt(raw.iter().fold(0u64, |acc, &b| (acc << 8) | b as u64))
            }
            YEAR => Val::Int(text()?.parse().map_err(|_| bad("no year"))?),
            DATE => match date(raw).ok_or_else(|| bad("a DATE of unexpected shape"))? {
                true => Val::Str(text()?),
                false => Val::Null, // zero or impossible: no Python date
            },
            DATETIME | TIMESTAMP => match datetime(raw).ok_or_else(|| bad("a DATETIME of unexpected shape"))? {
                Some(mut iso) => {
                    if self.kinds[c] == TIMESTAMP {
                        iso.push_str("+00:00");
                    }
                    Val::Owned(iso)
                }
                None => Val::Null,
            },
            JSON => Val::Json(text()?),
            _ => unreachable!("kinds are checked in new()"),
        })
    }

    fn value<'py>(&self, py: Python<'py>, c: usize, raw: &[u8]) -> U<Bound<'py, PyAny>> {
        self.parse(c, raw)?
            .to_py(py, &self.ctx)
            .map_err(|m| format!("column {c}: {m}"))
    }

    /// One value as orjson writes the object ``value`` makes of it (crate::row_json).
    fn value_json(&self, out: &mut String, c: usize, raw: &[u8]) -> U<()> {
        self.parse(c, raw)?
            .push_json(out)
            .map_err(|m| format!("column {c}: {m}"))
    }

    pub(crate) fn width(&self) -> usize {
        self.kinds.len()
    }

    /// Column `c`'s canonical value from its text (a key value of a row read as text).
    pub(crate) fn key_value<'py>(&self, py: Python<'py>, c: usize, raw: &[u8]) -> U<Bound<'py, PyAny>> {
        self.value(py, c, raw)
    }

    /// A row packet's JSON text into `out`, its key's (a JSON array) into `key_out`; gives its
    /// key columns' raw texts.
    pub(crate) fn row_text(
        &self,
        d: &[u8],
        key: &[usize],
        out: &mut String,
        key_out: &mut String,
    ) -> U<Vec<Option<Vec<u8>>>> {
        let mut raws = Vec::with_capacity(self.kinds.len());
        let mut pos = 0usize;
        for _ in 0..self.kinds.len() {
            raws.push(field(d, &mut pos).ok_or("a row packet shorter than its columns")?);
        }
        if pos != d.len() {
            return Err("a row packet longer than its columns".into());
        }
        out.push('{');
        for (c, raw) in raws.iter().enumerate() {
            if c > 0 {
                out.push(',');
            }
            out.push_str(&self.name_json[c]);
            match raw {
                None => out.push_str("null"),
                Some(raw) => self.value_json(out, c, raw)?,
            }
        }
        out.push('}');
        push_key_json(key_out, key, &raws, |out, c, raw| self.value_json(out, c, raw))?;
        Ok(key.iter().map(|&k| raws[k].map(<[u8]>::to_vec)).collect())
    }
}

/// One length-coded string at `pos`: Some(None) for NULL (0xFB); None past the end.
fn field<'a>(d: &'a [u8], pos: &mut usize) -> Option<Option<&'a [u8]>> {
    let first = *d.get(*pos)?;
    *pos += 1;
    let n = match first {
        0xFB => return Some(None),
        0xFC => 2,
        0xFD => 3,
        0xFE => 8,
        0xFF => return None,
        small => {
            let end = pos.checked_add(small as usize)?;
            let s = d.get(*pos..end)?;
            *pos = end;
            return Some(Some(s));
        }
    };
    let len = d
        .get(*pos..*pos + n)?
        .iter()
        .rev()
        .fold(0usize, |acc, &b| (acc << 8) | b as usize);
    *pos += n;
    let end = pos.checked_add(len)?;
    let s = d.get(*pos..end)?;
    *pos = end;
    Some(Some(s))
}

fn num(s: &[u8]) -> Option<i64> {
    if s.is_empty() || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(s.iter().fold(0i64, |acc, &b| acc * 10 + (b - b'0') as i64))
}

/// 'YYYY-MM-DD': Some(true) a date Python can hold (the text is its isoformat), Some(false)
/// zero or impossible (PyMySQL hands back the text, from_select makes it None).
fn date(b: &[u8]) -> Option<bool> {
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return None;
    }
    let (y, m, d) = (num(&b[..4])?, num(&b[5..7])?, num(&b[8..10])?);
    Some(y >= 1 && (1..=12).contains(&m) && d >= 1 && d <= days_in_month(y, m))
}

/// 'YYYY-MM-DD HH:MM:SS[.f{1,6}]' as datetime.isoformat() writes it (the fraction only when
/// not zero); Some(None) for a zero or impossible value (None, as from_select makes it).
fn datetime(b: &[u8]) -> Option<Option<String>> {
    if b.len() < 19 || b[10] != b' ' || b[13] != b':' || b[16] != b':' {
        return None;
    }
    let valid_date = date(&b[..10])?;
    let (h, mi, s) = (num(&b[11..13])?, num(&b[14..16])?, num(&b[17..19])?);
    let micro = match &b[19..] {
        [] => 0,
        [b'.', frac @ ..] if (1..=6).contains(&frac.len()) => num(frac)? * 10i64.pow(6 - frac.len() as u32),
        _ => return None,
    };
    if !valid_date || h > 23 || mi > 59 || s > 59 {
        return Some(None);
    }
    let mut out = String::with_capacity(26);
    out.push_str(std::str::from_utf8(&b[..10]).ok()?);
    out.push('T');
    out.push_str(std::str::from_utf8(&b[11..19]).ok()?);
    if micro != 0 {
        out.push_str(&format!(".{micro:06}"));
    }
    Some(Some(out))
}
