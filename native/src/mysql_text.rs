//! Makes the rows of a MySQL/MariaDB chunk SELECT (text protocol) canonical, straight from
//! the row packets PyMySQL read (sources/mysql_select_native.py hands them over), as
//! `from_select` would make them from PyMySQL's converted values
//! (airflow_provider_dblog/sources/mysql_values.py).
//!
//! Each row packet is one length-coded string per column (0xFB: NULL). What this does not
//! reproduce exactly (a value of unexpected shape) raises `Unsupported`, and the chunk is
//! converted by PyMySQL and `from_select` instead.

use crate::{base64, days_in_month, loads_json, Unsupported};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString};

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
    kinds: Vec<u8>,
    b64_key: Py<PyString>,
    json_loads: Py<PyAny>,
    orjson_loads: Option<Py<PyAny>>,
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
        let names: Vec<Py<PyString>> = names.iter().map(|n| PyString::intern(py, n).unbind()).collect();
        Ok(MyTextPlan {
            template: crate::row_template(py, &names)?,
            names,
            kinds,
            b64_key: PyString::intern(py, "$b64").unbind(),
            json_loads: py.import("json")?.getattr("loads")?.unbind(),
            orjson_loads: py
                .import("orjson")
                .and_then(|m| m.getattr("loads"))
                .ok()
                .map(Bound::unbind),
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

    fn value<'py>(&self, py: Python<'py>, c: usize, raw: &[u8]) -> U<Bound<'py, PyAny>> {
        let bad = |what: &str| format!("column {c}: {what}");
        let text = || std::str::from_utf8(raw).map_err(|_| bad("text that is not UTF-8"));
        let obj = |r: PyResult<Bound<'py, PyAny>>| r.map_err(|e| e.to_string());
        Ok(match self.kinds[c] {
            INT => {
                let t = text()?;
                match t.parse::<i64>() {
                    Ok(v) => v.into_pyobject(py).unwrap_or_else(|e| match e {}).into_any(),
                    Err(_) => {
                        let v = t.parse::<u64>().map_err(|_| bad("no integer"))?;
                        v.into_pyobject(py).unwrap_or_else(|e| match e {}).into_any()
                    }
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
                PyString::new(py, t).into_any()
            }
            DOUBLE | FLOAT => {
                let v: f64 = text()?.parse().map_err(|_| bad("no number"))?;
                if !v.is_finite() {
                    return Err(bad("a number that is not finite"));
                }
                // FLOAT: 7 significant digits, as '%.7g' rounds (see the binlog decoder).
                let v = if self.kinds[c] == FLOAT {
                    format!("{v:.6e}").parse::<f64>().unwrap_or(v)
                } else {
                    v
                };
                v.into_pyobject(py).unwrap_or_else(|e| match e {}).into_any()
            }
            TEXT => PyString::new(py, text()?).into_any(),
            BINARY => {
                let d = PyDict::new(py);
                d.set_item(self.b64_key.bind(py), base64(raw, 0))
                    .map_err(|e| e.to_string())?;
                d.into_any()
            }
            BIT => {
                if raw.len() > 8 {
                    return Err(bad("a BIT wider than 64"));
                }
                let v = raw.iter().fold(0u64, |acc, &b| (acc << 8) | b as u64);
                v.into_pyobject(py).unwrap_or_else(|e| match e {}).into_any()
            }
            YEAR => {
                let v: i64 = text()?.parse().map_err(|_| bad("no year"))?;
                v.into_pyobject(py).unwrap_or_else(|e| match e {}).into_any()
            }
            DATE => match date(raw).ok_or_else(|| bad("a DATE of unexpected shape"))? {
                true => PyString::new(py, text()?).into_any(),
                false => py.None().into_bound(py), // zero or impossible: no Python date
            },
            DATETIME | TIMESTAMP => match datetime(raw).ok_or_else(|| bad("a DATETIME of unexpected shape"))? {
                Some(mut iso) => {
                    if self.kinds[c] == TIMESTAMP {
                        iso.push_str("+00:00");
                    }
                    PyString::new(py, &iso).into_any()
                }
                None => py.None().into_bound(py),
            },
            JSON => obj(loads_json(
                py,
                self.orjson_loads.as_ref(),
                &self.json_loads,
                PyString::new(py, text()?),
            ))
            .map_err(|_| bad("a value that is not JSON"))?,
            _ => unreachable!("kinds are checked in new()"),
        })
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
