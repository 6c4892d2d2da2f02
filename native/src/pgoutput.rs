//! Decodes the row changes of pgoutput (protocol version 1) messages, Insert, Update and
//! Delete, straight into DBLog's canonical values (airflow_provider_dblog/sources/
//! postgres_values.py: the column kinds are `pg_kind`'s, the Python glue is
//! sources/postgres/pgoutput_native.py).
//!
//! Python keeps the stream, the transactions, the Relation messages and every other message;
//! for a row change of a relation it hands over the message and gets (tag, before, after)
//! back. What this decoder does not reproduce exactly (a timestamp in another form than
//! the UTC ISO one, an unchanged-TOAST column, binary values, text that is no number of its
//! kind, ...) raises `Unsupported`, and that message is decoded in Python instead.

use crate::values::{push_key_json, PyCtx, Val};
use crate::{row_json, Unsupported};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};
use std::borrow::Cow;

// Column kinds (postgres_values.PG_KINDS has the same list, in this order).
const TEXT: u8 = 0; // canonical as PostgreSQL prints it
const INT: u8 = 1;
const FLOAT: u8 = 2;
const BOOL: u8 = 3;
const BYTEA: u8 = 4;
const TIMESTAMP: u8 = 5;
const TIMESTAMPTZ: u8 = 6;
const UUID: u8 = 7;
const JSON: u8 = 8;
const REAL: u8 = 9; // float4: the float32 its text reads as, widened to a double

type U<T> = Result<T, String>; // Err: why the message goes to the Python decoder

#[pyclass(frozen, module = "airflow_provider_dblog._rows_native")]
pub struct PgRowPlan {
    names: Vec<Py<PyString>>,
    name_json: Vec<String>, // `"name":` per column (change_text)
    kinds: Vec<u8>,
    is_key: Vec<bool>,
    ctx: PyCtx,           // the values' Python side (crate::values)
    template: Py<PyDict>, // crate::row_template
}

struct Rd<'a> {
    d: &'a [u8],
    pos: usize,
}

impl<'a> Rd<'a> {
    fn take(&mut self, n: usize) -> U<&'a [u8]> {
        if self.d.len() - self.pos < n {
            return Err(format!("message truncated at offset {}", self.pos));
        }
        let s = &self.d[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    fn byte(&mut self) -> U<u8> {
        Ok(self.take(1)?[0])
    }
    fn be(&mut self, n: usize) -> U<u64> {
        Ok(self.take(n)?.iter().fold(0u64, |acc, &b| (acc << 8) | b as u64))
    }
}

#[pymethods]
impl PgRowPlan {
    /// PgRowPlan(names, kinds, is_key): one relation's columns in Relation-message order.
    #[new]
    fn new(py: Python<'_>, names: Vec<String>, kinds: Vec<u8>, is_key: Vec<bool>) -> PyResult<Self> {
        if names.len() != kinds.len() || names.len() != is_key.len() {
            return Err(pyo3::exceptions::PyValueError::new_err(
                "names, kinds and is_key must be of one length",
            ));
        }
        if let Some(k) = kinds.iter().find(|&&k| k > REAL) {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "unknown column kind {k}"
            )));
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
        Ok(PgRowPlan {
            name_json,
            template: crate::row_template(py, &names)?,
            names,
            kinds,
            is_key,
            ctx: PyCtx::new(py)?,
        })
    }

    /// One Insert ('I'), Update ('U') or Delete ('D') message: (tag, before, after), an image
    /// None where the message has none. A 'K' old tuple gives the key columns only (the others
    /// are NULL fillers).
    fn change<'py>(&self, py: Python<'py>, msg: &Bound<'py, PyBytes>) -> PyResult<Bound<'py, PyAny>> {
        let d = msg.as_bytes();
        self.decode(py, d).map_err(Unsupported::new_err)
    }

    /// ``change`` with the images as their changelog JSON text (what the Delta output writes
    /// for the dicts, crate::row_json): (tag, before_key, after_key, before, after), the keys
    /// tuples of the columns at ``key`` (None with the image). Unsupported also for a value
    /// only Python writes exactly (a JSON integer beyond 64 bits, ...) and for a key column a
    /// key-only image lacks.
    fn change_text<'py>(
        &self,
        py: Python<'py>,
        msg: &Bound<'py, PyBytes>,
        key: Vec<usize>,
    ) -> PyResult<Bound<'py, PyAny>> {
        if key.is_empty() || key.iter().any(|&c| c >= self.kinds.len()) {
            return Err(pyo3::exceptions::PyValueError::new_err(
                "key must list column indices of the plan",
            ));
        }
        self.decode_text(py, msg.as_bytes(), &key).map_err(Unsupported::new_err)
    }

    /// ``change_text`` for a run of messages: from ``payloads[start]`` on, the Insert, Update or
    /// Delete messages of one relation with the first one's tag, as far as each is a change
    /// ``change_text`` decodes whose key the change keeps (an update that moves its key ends
    /// the run). Gives (n, tag, keys, befores, afters): n messages decoded, each one's key
    /// tuple (the old image's for a delete) and images as text (None where it has none), in
    /// one call instead of one per message. Unsupported when the first message is not one.
    fn run_text<'py>(
        &self,
        py: Python<'py>,
        payloads: &Bound<'py, PyList>,
        start: usize,
        key: Vec<usize>,
    ) -> PyResult<RunText<'py>> {
        if key.is_empty() || key.iter().any(|&c| c >= self.kinds.len()) {
            return Err(pyo3::exceptions::PyValueError::new_err(
                "key must list column indices of the plan",
            ));
        }
        let (keys, befores, afters) = (PyList::empty(py), PyList::empty(py), PyList::empty(py));
        let mut head: Option<(u8, [u8; 4])> = None; // the run's tag and relation id bytes
        let mut n = 0;
        for item in payloads.iter().skip(start) {
            let msg = item.downcast::<PyBytes>()?;
            let d = msg.as_bytes();
            match head {
                Some((tag, relid)) if d.first() != Some(&tag) || d.get(1..5) != Some(&relid[..]) => break,
                _ => {}
            }
            let decoded = frame(d, |rd, key_only| self.tuple_text(py, rd, key_only, &key));
            let (tag, before, after) = match decoded {
                Ok(v) => v,
                Err(why) if n == 0 => return Err(Unsupported::new_err(why)),
                Err(_) => break, // decoded alone next, where its reason is logged
            };
            let text = |image: Option<&(Bound<'py, PyAny>, String)>| match image {
                Some((_, t)) => PyString::new(py, t).into_any(),
                None => py.None().into_bound(py),
            };
            let row_key = match (&before, &after) {
                (Some((old, _)), Some((new, _))) => {
                    if !old.eq(new)? {
                        if n == 0 {
                            return Err(Unsupported::new_err("an update that changes its key"));
                        }
                        break;
                    }
                    new.clone()
                }
                (_, Some((k, _))) | (Some((k, _)), None) => k.clone(),
                (None, None) => unreachable!("a row change has an image"),
            };
            if head.is_none() {
                head = Some((tag, d[1..5].try_into().expect("a decoded message has its relation id")));
            }
            keys.append(row_key)?;
            befores.append(text(before.as_ref()))?;
            afters.append(text(after.as_ref()))?;
            n += 1;
        }
        let tag = head.map_or(0, |(t, _)| t);
        Ok((n, tag, keys, befores, afters))
    }

    /// A chunk SELECT's rows (tuples in column order, values as psycopg2 gave them) as
    /// {name: value} dicts, the text of the columns ``convert`` marks made canonical like
    /// the log's; the others are taken as they are (bool/int columns psycopg2 already cast,
    /// text that is canonical).
    fn rows<'py>(&self, py: Python<'py>, raw: &Bound<'py, PyList>, convert: Vec<bool>) -> PyResult<Bound<'py, PyList>> {
        let n = self.kinds.len();
        if convert.len() != n {
            return Err(pyo3::exceptions::PyValueError::new_err("one convert flag per column"));
        }
        let out = PyList::empty(py);
        for row in raw.iter() {
            let row = row.downcast_into::<PyTuple>()?;
            if row.len() != n {
                return Err(Unsupported::new_err(format!(
                    "a row of {} columns, {n} planned",
                    row.len()
                )));
            }
            let dict = self.template.bind(py).copy()?;
            for (c, v) in row.iter().enumerate() {
                let value = if convert[c] && !v.is_none() {
                    let text = v.downcast::<PyString>()?.to_str()?;
                    self.value(py, c, text.as_bytes()).map_err(Unsupported::new_err)?
                } else {
                    v
                };
                dict.set_item(self.names[c].bind(py), value)?;
            }
            out.append(dict)?;
        }
        Ok(out)
    }
}

/// `PgRowPlan.run_text`'s answer: (n, tag, keys, befores, afters).
type RunText<'py> = (usize, u8, Bound<'py, PyList>, Bound<'py, PyList>, Bound<'py, PyList>);

/// An Insert/Update/Delete message's (tag, before, after), each image read by `image(rd,
/// key_only)`; None where the message has none.
fn frame<T>(d: &[u8], mut image: impl FnMut(&mut Rd<'_>, bool) -> U<T>) -> U<(u8, Option<T>, Option<T>)> {
    let mut rd = Rd { d, pos: 0 };
    let tag = rd.byte()?;
    rd.be(4)?; // the relation id: the caller chose this plan by it
    let (before, after) = match tag {
        b'I' => {
            if rd.byte()? != b'N' {
                return Err("Insert without a new tuple".into());
            }
            (None, Some(image(&mut rd, false)?))
        }
        b'U' => {
            let mut kind = rd.byte()?;
            let mut old = None;
            if kind == b'K' || kind == b'O' {
                old = Some(image(&mut rd, kind == b'K')?);
                kind = rd.byte()?;
            }
            if kind != b'N' {
                return Err("Update without a new tuple".into());
            }
            (old, Some(image(&mut rd, false)?))
        }
        b'D' => {
            let kind = rd.byte()?;
            if kind != b'K' && kind != b'O' {
                return Err("Delete without an old tuple".into());
            }
            (Some(image(&mut rd, kind == b'K')?), None)
        }
        _ => return Err(format!("message type {tag} is no row change")),
    };
    if rd.pos != d.len() {
        return Err("trailing bytes after the row change".into());
    }
    Ok((tag, before, after))
}

impl PgRowPlan {
    fn decode<'py>(&self, py: Python<'py>, d: &[u8]) -> U<Bound<'py, PyAny>> {
        let (tag, before, after) = frame(d, |rd, key_only| self.tuple(py, rd, key_only))?;
        let none = || py.None().into_bound(py);
        (tag, before.unwrap_or_else(none), after.unwrap_or_else(none))
            .into_pyobject(py)
            .map(|t| t.into_any())
            .map_err(|e| e.to_string())
    }

    fn decode_text<'py>(&self, py: Python<'py>, d: &[u8], key: &[usize]) -> U<Bound<'py, PyAny>> {
        let (tag, before, after) = frame(d, |rd, key_only| self.tuple_text(py, rd, key_only, key))?;
        let none = || py.None().into_bound(py);
        let split = |image: Option<(Bound<'py, PyAny>, String)>| match image {
            Some((k, text)) => (k, PyString::new(py, &text).into_any()),
            None => (none(), none()),
        };
        let (before_key, before) = split(before);
        let (after_key, after) = split(after);
        (tag, before_key, after_key, before, after)
            .into_pyobject(py)
            .map(|t| t.into_any())
            .map_err(|e| e.to_string())
    }

    /// A TupleData's raw values (None: NULL), one per column of the relation.
    fn columns<'a>(&self, rd: &mut Rd<'a>) -> U<Vec<Option<&'a [u8]>>> {
        let count = rd.be(2)? as usize;
        if count != self.kinds.len() {
            return Err(format!(
                "{count} columns in the tuple, {} in the relation",
                self.kinds.len()
            ));
        }
        (0..count)
            .map(|_| match rd.byte()? {
                b'n' => Ok(None),
                b't' => {
                    let n = rd.be(4)? as usize;
                    Ok(Some(rd.take(n)?))
                }
                b'u' => Err("an unchanged TOAST value".into()),
                k => Err(format!("tuple column kind {k}")),
            })
            .collect()
    }

    fn tuple<'py>(&self, py: Python<'py>, rd: &mut Rd<'_>, key_only: bool) -> U<Bound<'py, PyAny>> {
        let raws = self.columns(rd)?;
        // A key-only image holds the key columns only; a full one starts from the template.
        let row = if key_only {
            Ok(PyDict::new(py))
        } else {
            self.template.bind(py).copy()
        }
        .map_err(|e| e.to_string())?;
        for (c, raw) in raws.into_iter().enumerate() {
            if key_only && !self.is_key[c] {
                continue;
            }
            let obj = match raw {
                None => py.None().into_bound(py),
                Some(raw) => self.value(py, c, raw)?,
            };
            row.set_item(self.names[c].bind(py), obj).map_err(|e| e.to_string())?;
        }
        Ok(row.into_any())
    }

    /// The JSON text of a whole row given as its columns' texts (None: NULL), for a chunk read
    /// by COPY (crate::pq_stream).
    pub(crate) fn image_json<B: AsRef<[u8]>>(&self, out: &mut String, raws: &[Option<B>]) -> U<()> {
        if raws.len() != self.kinds.len() {
            return Err(format!("a row of {} columns for {}", raws.len(), self.kinds.len()));
        }
        out.push('{');
        for (c, raw) in raws.iter().enumerate() {
            if c > 0 {
                out.push(',');
            }
            out.push_str(&self.name_json[c]);
            match raw {
                None => out.push_str("null"),
                Some(raw) => self.value_json(out, c, raw.as_ref())?,
            }
        }
        out.push('}');
        Ok(())
    }

    /// The JSON array of the key columns `key` of a row given as its columns' texts, as
    /// orjson writes the key tuple of `key_value`s (the changelog's key column).
    pub(crate) fn key_json<B: AsRef<[u8]>>(&self, out: &mut String, key: &[usize], raws: &[Option<B>]) -> U<()> {
        push_key_json(out, key, raws, |out, c, raw| self.value_json(out, c, raw))
    }

    /// Column `c`'s canonical value from its text (a key value of a chunk read by COPY).
    pub(crate) fn key_value<'py>(&self, py: Python<'py>, c: usize, raw: Option<&[u8]>) -> U<Bound<'py, PyAny>> {
        match raw {
            None => Ok(py.None().into_bound(py)),
            Some(raw) => self.value(py, c, raw),
        }
    }

    pub(crate) fn width(&self) -> usize {
        self.kinds.len()
    }

    /// One tuple as (its key tuple, its JSON text).
    fn tuple_text<'py>(
        &self,
        py: Python<'py>,
        rd: &mut Rd<'_>,
        key_only: bool,
        key: &[usize],
    ) -> U<(Bound<'py, PyAny>, String)> {
        let raws = self.columns(rd)?;
        let mut out = String::with_capacity(32 * raws.len());
        out.push('{');
        for (c, raw) in raws.iter().enumerate() {
            if key_only && !self.is_key[c] {
                continue;
            }
            if out.len() > 1 {
                out.push(',');
            }
            out.push_str(&self.name_json[c]);
            match raw {
                None => out.push_str("null"),
                Some(raw) => self.value_json(&mut out, c, raw)?,
            }
        }
        out.push('}');
        let mut values = Vec::with_capacity(key.len());
        for &k in key {
            if key_only && !self.is_key[k] {
                return Err(format!("column {k}: a key column the key-only image has not"));
            }
            values.push(match raws[k] {
                None => py.None().into_bound(py),
                Some(raw) => self.value(py, k, raw)?,
            });
        }
        let key = PyTuple::new(py, values).map_err(|e| e.to_string())?;
        Ok((key.into_any(), out))
    }

    /// A value's text checked and read by its column's kind.
    fn parse<'a>(&self, c: usize, raw: &'a [u8]) -> U<Val<'a>> {
        let text = std::str::from_utf8(raw).map_err(|_| format!("column {c}: text that is not UTF-8"))?;
        let bad = |what: &str| format!("column {c}: {what}");
        Ok(match self.kinds[c] {
            TEXT => Val::Str(text),
            INT => Val::Int(text.parse().map_err(|_| bad("an integer beyond 64 bits"))?),
            FLOAT => match text {
                "NaN" | "Infinity" | "-Infinity" => Val::Str(text),
                _ => {
                    let v: f64 = text.parse().map_err(|_| bad("a float it cannot read"))?;
                    if !v.is_finite() {
                        return Err(bad("a float spelled unlike PostgreSQL"));
                    }
                    Val::Float(v)
                }
            },
            REAL => match text {
                "NaN" | "Infinity" | "-Infinity" => Val::Str(text),
                _ => {
                    // Rust reads the text straight into a float32, rounded once (float4in's
                    // reading); postgres_values._real gets the same value in Python.
                    let v: f32 = text.parse().map_err(|_| bad("a float it cannot read"))?;
                    if !v.is_finite() {
                        return Err(bad("a float spelled unlike PostgreSQL"));
                    }
                    Val::Float(v as f64)
                }
            },
            BOOL => match text {
                "t" | "true" => Val::Bool(true),
                "f" | "false" => Val::Bool(false),
                _ => return Err(bad("not a boolean")),
            },
            BYTEA => {
                let hex = text.strip_prefix("\\x").ok_or_else(|| bad("bytea not in hex format"))?;
                Val::Bytes(Cow::Owned(
                    unhex(hex.as_bytes()).ok_or_else(|| bad("bytea with an odd hex digit"))?,
                ))
            }
            TIMESTAMP | TIMESTAMPTZ => Val::Owned(
                iso_timestamp(text, self.kinds[c] == TIMESTAMPTZ)
                    .ok_or_else(|| bad("a timestamp not in UTC ISO form"))?,
            ),
            UUID => Val::Owned(text.to_ascii_lowercase()),
            JSON => Val::Json(text),
            _ => unreachable!("kinds are checked in new()"),
        })
    }

    fn value<'py>(&self, py: Python<'py>, c: usize, raw: &[u8]) -> U<Bound<'py, PyAny>> {
        self.parse(c, raw)?
            .to_py(py, &self.ctx)
            .map_err(|m| format!("column {c}: {m}"))
    }

    /// One value as orjson writes the object ``value`` makes of it.
    fn value_json(&self, out: &mut String, c: usize, raw: &[u8]) -> U<()> {
        self.parse(c, raw)?
            .push_json(out)
            .map_err(|m| format!("column {c}: {m}"))
    }
}

fn unhex(h: &[u8]) -> Option<Vec<u8>> {
    if h.len() % 2 != 0 {
        return None;
    }
    let digit = |b: u8| (b as char).to_digit(16).map(|v| v as u8);
    h.chunks(2).map(|p| Some(digit(p[0])? << 4 | digit(p[1])?)).collect()
}

/// postgres_values._timestamp for the one form a UTC session prints ('2024-01-02
/// 03:04:05[.123][+00]'), None for any other (the Python path decides those).
fn iso_timestamp(t: &str, with_zone: bool) -> Option<String> {
    let b = t.as_bytes();
    let digits = |r: std::ops::Range<usize>| b.get(r.clone()).is_some_and(|s| s.iter().all(u8::is_ascii_digit));
    let shape = b.len() >= 19
        && digits(0..4)
        && b[4] == b'-'
        && digits(5..7)
        && b[7] == b'-'
        && digits(8..10)
        && b[10] == b' '
        && digits(11..13)
        && b[13] == b':'
        && digits(14..16)
        && b[16] == b':'
        && digits(17..19);
    if !shape {
        return None;
    }
    let mut pos = 19;
    let mut frac = "";
    if b.get(pos) == Some(&b'.') {
        let n = b[pos + 1..].iter().take_while(|c| c.is_ascii_digit()).count();
        if !(1..=6).contains(&n) {
            return None;
        }
        frac = &t[pos + 1..pos + 1 + n];
        pos += 1 + n;
    }
    let offset = &t[pos..];
    if !matches!(offset, "" | "+00" | "+00:00" | "-00") {
        return None;
    }
    if !with_zone && !offset.is_empty() {
        return None; // Python drops it; never printed for timestamp without time zone
    }
    let mut out = String::with_capacity(32);
    out.push_str(&t[..10]);
    out.push('T');
    out.push_str(&t[11..19]);
    if !frac.is_empty() {
        out.push('.');
        out.push_str(frac);
        out.extend(std::iter::repeat_n('0', 6 - frac.len()));
    }
    if with_zone {
        out.push_str("+00:00");
    }
    Some(out)
}
