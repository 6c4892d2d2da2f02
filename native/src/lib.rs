//! Decodes the row images of MySQL/MariaDB binlog rows events (WRITE/UPDATE/DELETE, v1 and
//! v2) straight into DBLog's canonical values (airflow_provider_dblog/sources/mysql/values.py).
//!
//! mysql-replication keeps the connection, the event framing and the table maps; Python hands
//! over the event's packet bytes with the offsets of the row images, and a `Plan` built once per
//! table map (airflow_provider_dblog/sources/mysql/rows_native.py says what each column spec
//! means). Decoding runs in two phases: the images are parsed into `Cell`s without the GIL
//! (released for large events only), then the Python dicts are built with it.
//!
//! Anything this decoder does not reproduce exactly raises `Unsupported`, and the caller decodes
//! that event with mysql-replication instead; a body that ends inside a row raises
//! `RowsDecodeError` naming the column and the offsets.

use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};
use std::fmt::Write as _;

mod mysql_result;
mod murmur2;
mod mysql_text;
mod pgoutput;
mod pq_copy;
mod pq_stream;
mod row_json;
mod text_column;
mod values;

create_exception!(
    airflow_provider_dblog._rows_native,
    RowsDecodeError,
    PyValueError,
    "A rows event body that cannot be decoded (truncated or malformed)."
);
create_exception!(
    airflow_provider_dblog._rows_native,
    Unsupported,
    PyException,
    "A column type or value the native decoder does not handle: decode the event in Python."
);

// Column spec codes (the first item of each spec tuple; mysql_rows_native.py has the same list).
const INT: u8 = 1;
const DECIMAL: u8 = 2;
const DOUBLE: u8 = 3;
const FLOAT: u8 = 4;
const STRING: u8 = 5;
const YEAR: u8 = 6;
const BIT: u8 = 7;
const DATE: u8 = 8;
const DATETIME2: u8 = 9;
const TIMESTAMP2: u8 = 10;
const TIME2: u8 = 11;
const ENUM: u8 = 12;
const SET: u8 = 13;

// Output of a STRING column.
const AS_TEXT: i64 = 0;
const AS_BINARY: i64 = 1;
const AS_JSON: i64 = 2;

/// Below this body size the GIL is kept: giving it up and taking it back costs more than a
/// small event takes to decode, and another thread may hold it for a whole switch interval.
const RELEASE_GIL_BYTES: usize = 32 * 1024;

#[derive(Clone)]
enum Col {
    Int {
        width: usize,
        unsigned: bool,
    },
    Decimal {
        precision: usize,
        scale: usize,
    },
    Double,
    Float,
    Str {
        prefix: usize,
        out: i64,
        codec: bool,
        pad: usize,
    },
    Year,
    Bit {
        nbytes: usize,
        first_bits: u32,
    },
    Date,
    DateTime2 {
        fsp: u32,
    },
    Timestamp2 {
        fsp: u32,
    },
    Time2 {
        fsp: u32,
    },
    Enum {
        size: usize,
        labels: usize,
    }, // labels: count (0 = no labels in the table map)
    Set {
        size: usize,
        members: Vec<(u32, String)>,
        known: bool,
    },
}

/// One decoded value, still without Python objects (phase 1 runs without the GIL).
enum Cell {
    Null,
    I(i64),
    U(u64),
    F(f64),
    Utf8(usize, usize),  // validated UTF-8 slice of the packet
    Codec(usize, usize), // slice decoded with the column's Python codec
    Json(usize, usize),  // validated UTF-8 slice, parsed as JSON (Plan::json)
    JsonCodec(usize, usize),
    // Ranges of the parse's scratch text (one buffer per call instead of a String per value):
    JsonText(usize, usize), // JSON text decoded through a single-byte table
    Text(usize, usize),
    B64(usize, usize),
    Label(usize),
}

enum Fail {
    Truncated {
        col: usize,
        need: usize,
        at: usize,
        left: usize,
    },
    Unsupported(String),
}

type R<T> = Result<T, Fail>;

#[pyclass(frozen, module = "airflow_provider_dblog._rows_native")]
struct Plan {
    cols: Vec<Col>,
    names: Vec<Py<PyString>>,
    codecs: Vec<Option<std::ffi::CString>>,
    /// A single-byte character set's 256 characters (UNDEFINED where the codec refuses the
    /// byte), so that its text is decoded in phase 1 without a Python codec call.
    tables: Vec<Option<ByteTable>>,
    labels: Vec<Vec<Py<PyString>>>,
    label_texts: Vec<Vec<String>>, // the same labels, for decode_text without the GIL
    /// `"name":` of each column as JSON (with the comma before it from the second on).
    prefixes: Vec<String>,
    json_loads: Py<PyAny>,
    orjson_loads: Option<Py<PyAny>>,
    b64_key: Py<PyString>,
    template: Py<PyDict>, // row_template
}

fn spec_err(i: usize, msg: &str) -> PyErr {
    PyValueError::new_err(format!("column spec {i}: {msg}"))
}

#[pymethods]
impl Plan {
    /// Plan(names, specs): specs[i] = (code, a, b, c, extra), see mysql_rows_native.py.
    #[new]
    fn new(py: Python<'_>, names: Vec<String>, specs: Vec<(u8, i64, i64, i64, Bound<'_, PyAny>)>) -> PyResult<Self> {
        if names.len() != specs.len() || names.is_empty() {
            return Err(PyValueError::new_err(
                "names and specs must be non-empty and of one length",
            ));
        }
        let mut cols = Vec::with_capacity(specs.len());
        let mut codecs = Vec::with_capacity(specs.len());
        let mut tables = Vec::with_capacity(specs.len());
        let mut labels = Vec::with_capacity(specs.len());
        for (i, (code, a, b, c, extra)) in specs.into_iter().enumerate() {
            let mut codec = None;
            let mut table = None;
            let mut col_labels: Vec<Py<PyString>> = Vec::new();
            let col = match code {
                INT => {
                    if ![1, 2, 3, 4, 8].contains(&a) {
                        return Err(spec_err(i, "integer width must be 1, 2, 3, 4 or 8"));
                    }
                    Col::Int {
                        width: a as usize,
                        unsigned: b != 0,
                    }
                }
                DECIMAL => {
                    if !(1..=65).contains(&a) || b < 0 || b > a || b > 38 {
                        return Err(spec_err(i, "bad decimal precision/scale"));
                    }
                    Col::Decimal {
                        precision: a as usize,
                        scale: b as usize,
                    }
                }
                DOUBLE => Col::Double,
                FLOAT => Col::Float,
                STRING => {
                    if !(1..=4).contains(&a) || !(AS_TEXT..=AS_JSON).contains(&b) || c < 0 {
                        return Err(spec_err(i, "bad string spec"));
                    }
                    // extra: None (UTF-8), the codec's name, or (name, its 256 characters).
                    if !extra.is_none() {
                        let (name, chars): (String, Option<String>) = match extra.extract::<String>() {
                            Ok(name) => (name, None),
                            Err(_) => extra.extract()?,
                        };
                        codec = Some(std::ffi::CString::new(name).map_err(|_| spec_err(i, "bad codec name"))?);
                        if let Some(chars) = chars {
                            let chars: Vec<char> = chars.chars().collect();
                            if chars.len() != 256 {
                                return Err(spec_err(i, "a single-byte table needs 256 characters"));
                            }
                            let ascii = chars[..128].iter().enumerate().all(|(b, &ch)| ch as usize == b);
                            table = Some(ByteTable { chars, ascii });
                        }
                    }
                    Col::Str {
                        prefix: a as usize,
                        out: b,
                        codec: codec.is_some(),
                        pad: c as usize,
                    }
                }
                YEAR => Col::Year,
                BIT => {
                    if !(1..=8).contains(&a) || !(1..=8).contains(&b) {
                        return Err(spec_err(i, "bad bit spec"));
                    }
                    Col::Bit {
                        nbytes: a as usize,
                        first_bits: b as u32,
                    }
                }
                DATE => Col::Date,
                DATETIME2 | TIMESTAMP2 | TIME2 => {
                    if !(0..=6).contains(&a) {
                        return Err(spec_err(i, "fractional seconds precision must be 0..6"));
                    }
                    let fsp = a as u32;
                    match code {
                        DATETIME2 => Col::DateTime2 { fsp },
                        TIMESTAMP2 => Col::Timestamp2 { fsp },
                        _ => Col::Time2 { fsp },
                    }
                }
                ENUM => {
                    if !(1..=2).contains(&a) {
                        return Err(spec_err(i, "enum size must be 1 or 2"));
                    }
                    if !extra.is_none() {
                        for label in extra.try_iter()? {
                            col_labels.push(label?.downcast_into::<PyString>()?.unbind());
                        }
                    }
                    Col::Enum {
                        size: a as usize,
                        labels: col_labels.len(),
                    }
                }
                SET => {
                    if !(1..=8).contains(&a) {
                        return Err(spec_err(i, "set size must be 1..8"));
                    }
                    let known = !extra.is_none();
                    let mut members = Vec::new();
                    if known {
                        for m in extra.try_iter()? {
                            let (bit, label): (u32, String) = m?.extract()?;
                            if bit >= 64 {
                                return Err(spec_err(i, "set member bit out of range"));
                            }
                            members.push((bit, label));
                        }
                    }
                    Col::Set {
                        size: a as usize,
                        members,
                        known,
                    }
                }
                _ => return Err(spec_err(i, "unknown column code")),
            };
            cols.push(col);
            codecs.push(codec);
            tables.push(table);
            labels.push(col_labels);
        }
        let prefixes = names
            .iter()
            .enumerate()
            .map(|(i, name)| {
                let mut p = String::from(if i == 0 { "" } else { "," });
                row_json::push_str(&mut p, name);
                p.push(':');
                p
            })
            .collect();
        let label_texts = labels
            .iter()
            .map(|ls| ls.iter().map(|l| l.bind(py).to_string()).collect())
            .collect();
        let names: Vec<Py<PyString>> = names.iter().map(|n| PyString::intern(py, n).unbind()).collect();
        let template = row_template(py, &names)?;
        let json_loads = py.import("json")?.getattr("loads")?.unbind();
        let orjson_loads = py
            .import("orjson")
            .and_then(|m| m.getattr("loads"))
            .ok()
            .map(Bound::unbind);
        Ok(Plan {
            cols,
            names,
            codecs,
            tables,
            labels,
            label_texts,
            prefixes,
            json_loads,
            orjson_loads,
            b64_key: PyString::intern(py, "$b64").unbind(),
            template,
        })
    }

    fn __len__(&self) -> usize {
        self.cols.len()
    }

    /// The rows of one rows event as a list of (before, after) tuples of {name: value} dicts
    /// (None for the image the kind has not: kind 0 write, 1 delete, 2 update).
    /// ``data[start:end]`` holds the row images; ``present`` / ``present_after`` are the
    /// columns-present bitmaps (the second one for updates only).
    #[pyo3(signature = (data, start, end, kind, present, present_after=None))]
    #[allow(clippy::too_many_arguments)] // the Python signature
    fn decode<'py>(
        &self,
        py: Python<'py>,
        data: &Bound<'py, PyBytes>,
        start: usize,
        end: usize,
        kind: u8,
        present: &[u8],
        present_after: Option<&[u8]>,
    ) -> PyResult<Bound<'py, PyList>> {
        let buf = data.as_bytes();
        let (images, after) = self.check(buf, start, end, kind, present, present_after)?;
        let parse = || self.parse(buf, start, end, present, after, images);
        let parsed = if end - start >= RELEASE_GIL_BYTES {
            py.allow_threads(parse)
        } else {
            parse()
        };
        let (cells, scratch) = parsed.map_err(|f| self.error(py, f))?;
        self.build(py, buf, &scratch, &cells, kind, images)
    }

    /// The rows of one rows event as their changelog JSON: a list of (before_key, after_key,
    /// before, after) tuples. The keys are tuples of the canonical values of the columns at
    /// ``key``; the images are the text the Delta output writes for their dicts (row_json.rs),
    /// made without a Python object per value. None for what the kind has not. Raises
    /// ``Unsupported`` for a value only Python writes (a column in a multi-byte codec, a JSON
    /// value with an integer beyond 64 bits, ...): ``decode`` then gives the dicts.
    #[pyo3(signature = (data, start, end, kind, present, key, present_after=None))]
    #[allow(clippy::too_many_arguments)] // the Python signature
    fn decode_text<'py>(
        &self,
        py: Python<'py>,
        data: &Bound<'py, PyBytes>,
        start: usize,
        end: usize,
        kind: u8,
        present: &[u8],
        key: Vec<usize>,
        present_after: Option<&[u8]>,
    ) -> PyResult<Bound<'py, PyList>> {
        let buf = data.as_bytes();
        let (images, after) = self.check(buf, start, end, kind, present, present_after)?;
        let n = self.cols.len();
        if key.is_empty() || key.iter().any(|&c| c >= n) {
            return Err(PyValueError::new_err("key must list column indices of the plan"));
        }
        let work = || {
            let (cells, scratch) = self.parse(buf, start, end, present, after, images)?;
            let texts = self.render(buf, &scratch, &cells)?;
            Ok((cells, scratch, texts))
        };
        let done = if end - start >= RELEASE_GIL_BYTES {
            py.allow_threads(work)
        } else {
            work()
        };
        let (cells, scratch, texts) = done.map_err(|f| self.error(py, f))?;
        let out = PyList::empty(py);
        let none = py.None();
        for (r, row) in texts.chunks(images).enumerate() {
            let mut parts: Vec<Bound<'py, PyAny>> = Vec::with_capacity(4);
            for img in 0..images {
                let base = (r * images + img) * n;
                let values = key
                    .iter()
                    .map(|&c| self.object(py, buf, &scratch, c, &cells[base + c]))
                    .collect::<PyResult<Vec<_>>>()?;
                parts.push(PyTuple::new(py, values)?.into_any());
            }
            let text = |i: usize| PyString::new(py, &row[i]).into_any();
            let none = none.bind(py).clone();
            let item = match kind {
                0 => [none.clone(), parts.pop().unwrap(), none, text(0)],
                1 => [parts.pop().unwrap(), none.clone(), text(0), none],
                _ => {
                    let after_key = parts.pop().unwrap();
                    [parts.pop().unwrap(), after_key, text(0), text(1)]
                }
            };
            out.append(PyTuple::new(py, item)?)?;
        }
        Ok(out)
    }
}

/// A bounds-checked reader over the row images.
struct Rd<'a> {
    d: &'a [u8],
    pos: usize,
    end: usize,
    col: usize,
}

impl<'a> Rd<'a> {
    #[inline]
    fn take(&mut self, n: usize) -> R<&'a [u8]> {
        if self.end - self.pos < n {
            return Err(Fail::Truncated {
                col: self.col,
                need: n,
                at: self.pos,
                left: self.end - self.pos,
            });
        }
        let s = &self.d[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    #[inline]
    fn le(&mut self, n: usize) -> R<u64> {
        Ok(self.take(n)?.iter().rev().fold(0u64, |acc, &b| (acc << 8) | b as u64))
    }
    #[inline]
    fn be(&mut self, n: usize) -> R<u64> {
        Ok(self.take(n)?.iter().fold(0u64, |acc, &b| (acc << 8) | b as u64))
    }
    /// A big-endian signed integer of n bytes (how mysql-replication reads fractions).
    #[inline]
    fn be_signed(&mut self, n: usize) -> R<i64> {
        let v = self.be(n)?;
        let shift = 64 - 8 * n as u32;
        Ok(((v << shift) as i64) >> shift)
    }
}

fn unsupported<T>(msg: String) -> R<T> {
    Err(Fail::Unsupported(msg))
}

const DIG2BYTES: [usize; 10] = [0, 1, 1, 2, 2, 3, 3, 4, 4, 4];

pub(crate) fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// (year, month, day) of a day count since 1970-01-01 (proleptic Gregorian).
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// {name: None} for every column. Each row's dict is a copy of it with the values set: a
/// dict built key by key is resized (and rehashed) three times on its way to 30 entries.
pub(crate) fn row_template(py: Python<'_>, names: &[Py<PyString>]) -> PyResult<Py<PyDict>> {
    let template = PyDict::new(py);
    for name in names {
        template.set_item(name.bind(py), py.None())?;
    }
    Ok(template.unbind())
}

/// `v` in decimal (push_digits with a sign).
pub(crate) fn push_int(out: &mut String, v: i64) {
    if v < 0 {
        out.push('-');
    }
    push_digits(out, v.unsigned_abs(), 0);
}

/// `v` in decimal, zero-padded to at least `width` digits: what `{v:0width$}` writes, without
/// core::fmt's machinery (which was most of the cost of a formatted date or decimal).
pub(crate) fn push_digits(out: &mut String, mut v: u64, width: usize) {
    let mut buf = [b'0'; 20];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    let start = i.min(buf.len() - width.min(buf.len()));
    // SAFETY: ASCII digits only.
    out.push_str(unsafe { std::str::from_utf8_unchecked(&buf[start..]) });
}

/// 'YYYY-MM-DDTHH:MM:SS[.ffffff]', as datetime.isoformat() writes it.
fn iso_datetime(out: &mut String, (y, mo, d): (i64, i64, i64), (h, mi, s): (i64, i64, i64), micro: i64) {
    if [y, mo, d, h, mi, s, micro].iter().any(|&v| v < 0) {
        let _ = write!(out, "{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}"); // not from a valid value
        if micro != 0 {
            let _ = write!(out, ".{micro:06}");
        }
        return;
    }
    for (v, width, sep) in [(y, 4, '-'), (mo, 2, '-'), (d, 2, 'T'), (h, 2, ':'), (mi, 2, ':')] {
        push_digits(out, v as u64, width);
        out.push(sep);
    }
    push_digits(out, s as u64, 2);
    if micro != 0 {
        out.push('.');
        push_digits(out, micro as u64, 6);
    }
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

pub(crate) fn base64(raw: &[u8], pad_to: usize) -> String {
    let mut out = String::new();
    base64_into(&mut out, raw, pad_to);
    out
}

/// `raw` zero-padded to `pad_to` bytes, in base64, appended to `out`.
pub(crate) fn base64_into(out: &mut String, raw: &[u8], pad_to: usize) {
    let padded;
    let bytes = if raw.len() < pad_to {
        let mut v = raw.to_vec();
        v.resize(pad_to, 0); // BINARY(n) is zero-padded; the binlog drops the padding
        padded = v;
        &padded[..]
    } else {
        raw
    };
    out.reserve(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (b[0] as u32) << 16 | (b[1] as u32) << 8 | b[2] as u32;
        out.push(B64[(n >> 18) as usize & 63] as char);
        out.push(B64[(n >> 12) as usize & 63] as char);
        out.push(if chunk.len() > 1 {
            B64[(n >> 6) as usize & 63] as char
        } else {
            '='
        });
        out.push(if chunk.len() > 2 {
            B64[n as usize & 63] as char
        } else {
            '='
        });
    }
}

impl Plan {
    /// The checks both decoders make: (number of images per row, the after image's bitmap).
    fn check<'a>(
        &self,
        buf: &[u8],
        start: usize,
        end: usize,
        kind: u8,
        present: &'a [u8],
        present_after: Option<&'a [u8]>,
    ) -> PyResult<(usize, &'a [u8])> {
        if start > end || end > buf.len() {
            return Err(RowsDecodeError::new_err(format!(
                "rows event body {start}..{end} lies outside its packet of {} bytes",
                buf.len()
            )));
        }
        let n = self.cols.len();
        let bitmap_len = n.div_ceil(8);
        let images = match kind {
            0 | 1 => 1,
            2 => 2,
            _ => {
                return Err(PyValueError::new_err(
                    "kind must be 0 (write), 1 (delete) or 2 (update)",
                ))
            }
        };
        let after = if images == 2 {
            present_after.ok_or_else(|| PyValueError::new_err("an update needs present_after"))?
        } else {
            present
        };
        if present.len() < bitmap_len || after.len() < bitmap_len {
            return Err(RowsDecodeError::new_err(format!(
                "columns-present bitmap of {} bytes for {n} columns",
                present.len().min(after.len())
            )));
        }
        Ok((images, after))
    }

    fn error(&self, py: Python<'_>, f: Fail) -> PyErr {
        match f {
            Fail::Truncated { col, need, at, left } => RowsDecodeError::new_err(format!(
                "rows event truncated: column {col} ({}) needs {need} bytes at offset {at}, {left} left",
                self.names[col].bind(py)
            )),
            Fail::Unsupported(msg) => Unsupported::new_err(msg),
        }
    }

    /// Each image of `cells` as its JSON object text (no GIL needed).
    fn render(&self, buf: &[u8], scratch: &str, cells: &[Cell]) -> R<Vec<String>> {
        let n = self.cols.len();
        let mut out = Vec::with_capacity(cells.len() / n);
        for image in cells.chunks(n) {
            let mut t = String::with_capacity(self.prefixes.iter().map(String::len).sum::<usize>() + 16 * n);
            t.push('{');
            for (c, cell) in image.iter().enumerate() {
                t.push_str(&self.prefixes[c]);
                self.cell_json(&mut t, buf, scratch, c, cell)?;
            }
            t.push('}');
            out.push(t);
        }
        Ok(out)
    }

    /// One value as orjson writes the object `object` makes of it.
    fn cell_json(&self, out: &mut String, buf: &[u8], scratch: &str, c: usize, cell: &Cell) -> R<()> {
        // SAFETY (slices): validated as UTF-8 in phase 1.
        let slice = |at: usize, len: usize| unsafe { std::str::from_utf8_unchecked(&buf[at..at + len]) };
        match cell {
            Cell::Null => out.push_str("null"),
            Cell::I(v) => push_int(out, *v),
            Cell::U(v) => push_digits(out, *v, 0),
            Cell::F(v) => row_json::push_float(out, *v),
            Cell::Utf8(at, len) => row_json::push_str(out, slice(*at, *len)),
            Cell::Json(at, len) => row_json::push_json_text(out, slice(*at, *len))
                .map_err(|m| Fail::Unsupported(format!("column {c}: {m}")))?,
            Cell::JsonText(a, b) => row_json::push_json_text(out, &scratch[*a..*b])
                .map_err(|m| Fail::Unsupported(format!("column {c}: {m}")))?,
            Cell::Codec(..) | Cell::JsonCodec(..) => {
                return unsupported(format!("column {c}: text in a character set only Python decodes"))
            }
            Cell::Text(a, b) => row_json::push_str(out, &scratch[*a..*b]),
            Cell::B64(a, b) => {
                out.push_str("{\"$b64\":\"");
                out.push_str(&scratch[*a..*b]); // the base64 alphabet needs no escapes
                out.push_str("\"}");
            }
            Cell::Label(idx) => row_json::push_str(out, &self.label_texts[c][*idx]),
        }
        Ok(())
    }

    /// The images' cells, and the scratch text their Text/B64/JsonText ranges point into.
    fn parse(
        &self,
        d: &[u8],
        start: usize,
        end: usize,
        present: &[u8],
        after: &[u8],
        images: usize,
    ) -> R<(Vec<Cell>, String)> {
        let n = self.cols.len();
        let mut rd = Rd {
            d,
            pos: start,
            end,
            col: 0,
        };
        let mut cells = Vec::with_capacity(n * images * 16);
        let mut scratch = String::with_capacity(end - start);
        while rd.pos < rd.end {
            self.image(&mut rd, present, &mut cells, &mut scratch)?;
            if images == 2 {
                self.image(&mut rd, after, &mut cells, &mut scratch)?;
            }
        }
        Ok((cells, scratch))
    }

    fn image(&self, rd: &mut Rd<'_>, present: &[u8], out: &mut Vec<Cell>, scratch: &mut String) -> R<()> {
        let n = self.cols.len();
        let bitmap = &present[..n.div_ceil(8)];
        // mysql-replication counts every bit of the bitmap; the padding bits are zero.
        let count: u32 = bitmap.iter().map(|b| b.count_ones()).sum();
        rd.col = 0;
        let nulls = rd.take((count as usize).div_ceil(8))?;
        let mut ni = 0usize;
        for (i, col) in self.cols.iter().enumerate() {
            if bitmap[i / 8] & (1 << (i % 8)) == 0 {
                out.push(Cell::Null); // not in the image (binlog_row_image=MINIMAL)
                continue;
            }
            let is_null = nulls[ni / 8] & (1 << (ni % 8)) != 0;
            ni += 1;
            if is_null {
                out.push(Cell::Null);
                continue;
            }
            rd.col = i;
            out.push(self.value(rd, i, col, scratch)?);
        }
        Ok(())
    }

    /// One value; text it makes is appended to `s` (the cell holds its range).
    fn value(&self, rd: &mut Rd<'_>, i: usize, col: &Col, s: &mut String) -> R<Cell> {
        let at0 = s.len();
        Ok(match col {
            Col::Int { width, unsigned } => {
                let v = rd.le(*width)?;
                if *unsigned {
                    Cell::U(v)
                } else {
                    let shift = 64 - 8 * *width as u32;
                    Cell::I(((v << shift) as i64) >> shift)
                }
            }
            Col::Decimal { precision, scale } => {
                decimal(rd, *precision, *scale, s)?;
                Cell::Text(at0, s.len())
            }
            Col::Double => Cell::F(f64::from_bits(rd.le(8)?)),
            // FLOAT: the stored float32 widened to the double of the same value (mysql_values.py).
            Col::Float => Cell::F(f32::from_bits(rd.le(4)? as u32) as f64),
            Col::Str {
                prefix,
                out,
                codec,
                pad,
            } => {
                let len = rd.le(*prefix)? as usize;
                let at = rd.pos;
                let raw = rd.take(len)?;
                match *out {
                    AS_BINARY => {
                        base64_into(s, raw, *pad);
                        Cell::B64(at0, s.len())
                    }
                    _ if *codec && self.tables[i].is_some() => {
                        let table = self.tables[i].as_ref().expect("a table column");
                        let ascii = table.text(raw, s).ok_or_else(|| {
                            Fail::Unsupported(format!("column {i}: a value its character set cannot decode"))
                        })?;
                        match (ascii, *out == AS_JSON) {
                            (true, false) => Cell::Utf8(at, len), // ASCII: the bytes are the text
                            (true, true) => Cell::Json(at, len),
                            (false, false) => Cell::Text(at0, s.len()),
                            (false, true) => Cell::JsonText(at0, s.len()),
                        }
                    }
                    _ if *codec => {
                        if *out == AS_JSON {
                            Cell::JsonCodec(at, len)
                        } else {
                            Cell::Codec(at, len)
                        }
                    }
                    _ => {
                        if std::str::from_utf8(raw).is_err() {
                            return unsupported(format!("column {i}: a value is not valid UTF-8"));
                        }
                        if *out == AS_JSON {
                            Cell::Json(at, len)
                        } else {
                            Cell::Utf8(at, len)
                        }
                    }
                }
            }
            Col::Year => {
                let y = rd.le(1)? as i64;
                Cell::I(if y == 0 { 0 } else { 1900 + y }) // YEAR 0000 is stored as 0
            }
            Col::Bit { nbytes, first_bits } => {
                let raw = rd.take(*nbytes)?;
                let mask = if *first_bits >= 8 {
                    0xFF
                } else {
                    (1u16 << first_bits) as u8 - 1
                };
                let v = raw[1..]
                    .iter()
                    .fold((raw[0] & mask) as u64, |acc, &b| (acc << 8) | b as u64);
                Cell::U(v)
            }
            Col::Date => {
                let t = rd.le(3)? as i64;
                let (y, m, d) = ((t >> 9) & 0x7FFF, (t >> 5) & 0xF, t & 0x1F);
                if t == 0 || y == 0 || m == 0 || d == 0 {
                    Cell::Null // zero dates (documented in mysql_values.py)
                } else if m > 12 || d > days_in_month(y, m) || y > 9999 {
                    return unsupported(format!("column {i}: a DATE that is no calendar date"));
                } else {
                    push_digits(s, y as u64, 4);
                    s.push('-');
                    push_digits(s, m as u64, 2);
                    s.push('-');
                    push_digits(s, d as u64, 2);
                    Cell::Text(at0, s.len())
                }
            }
            Col::DateTime2 { fsp } => {
                let v = rd.be(5)? as i64;
                let ym = (v >> 22) & 0x1FFFF;
                let (y, mo, d) = (ym / 13, ym % 13, (v >> 17) & 0x1F);
                let (h, mi, sec) = ((v >> 12) & 0x1F, (v >> 6) & 0x3F, v & 0x3F);
                let micro = fraction(rd, *fsp)?;
                let valid = (1..=9999).contains(&y)
                    && (1..=12).contains(&mo)
                    && d >= 1
                    && d <= days_in_month(y, mo)
                    && h <= 23
                    && mi <= 59
                    && sec <= 59;
                if !valid {
                    Cell::Null // zero or invalid datetimes: no Python datetime
                } else if micro > 999_999 {
                    return unsupported(format!("column {i}: fractional seconds out of range"));
                } else {
                    iso_datetime(s, (y, mo, d), (h, mi, sec), micro.max(0));
                    Cell::Text(at0, s.len())
                }
            }
            Col::Timestamp2 { fsp } => {
                let secs = rd.be_signed(4)?;
                let micro = fraction(rd, *fsp)?.max(0);
                if micro > 999_999 {
                    return unsupported(format!("column {i}: fractional seconds out of range"));
                }
                if secs == 0 && micro == 0 {
                    Cell::Null // a zero TIMESTAMP is written as epoch 0
                } else {
                    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
                    iso_datetime(
                        s,
                        civil_from_days(days),
                        (rest / 3600, rest % 3600 / 60, rest % 60),
                        micro,
                    );
                    s.push_str("+00:00");
                    Cell::Text(at0, s.len())
                }
            }
            Col::Time2 { fsp } => {
                // MySQL's packed TIME2 (my_time_packed_from_binary): the 3-byte integer part
                // and the 0-3 byte fraction read together are one big-endian number, offset
                // by 0x800000 << fraction bits. Minus that offset it is the signed value
                // (hms << bits | fraction): a negative time with a fraction keeps its
                // fraction's magnitude only this way (mysql-replication reads the two parts
                // separately and gets -12:34:56.2 for -12:34:56.8).
                let n = match fsp {
                    1 | 2 => 1,
                    3 | 4 => 2,
                    5 | 6 => 3,
                    _ => 0,
                };
                let bits = 8 * n as u32;
                let raw = rd.be(3 + n)? as i64;
                let v = raw - (0x80_0000i64 << bits);
                let abs = v.unsigned_abs();
                let (hms, frac) = (abs >> bits, abs & ((1u64 << bits) - 1));
                // The fraction's unit: 1/100 s in one byte, 1/10,000 s in two, 1 µs in three.
                let (per_second, micro_unit) = match n {
                    1 => (100, 10_000),
                    2 => (10_000, 100),
                    3 => (1_000_000, 1),
                    _ => (1, 0),
                };
                if frac >= per_second {
                    return unsupported(format!("column {i}: a TIME fraction out of range"));
                }
                let (h, m, sec) = ((hms >> 12) & 0x3FF, (hms >> 6) & 0x3F, hms & 0x3F);
                let secs = h * 3600 + m * 60 + sec;
                let micro = frac * micro_unit;
                if v < 0 {
                    s.push('-');
                }
                push_digits(s, secs / 3600, 2);
                s.push(':');
                push_digits(s, secs % 3600 / 60, 2);
                s.push(':');
                push_digits(s, secs % 60, 2);
                if micro != 0 {
                    s.push('.');
                    push_digits(s, micro, 6);
                }
                Cell::Text(at0, s.len())
            }
            Col::Enum { size, labels } => {
                let idx = rd.le(*size)? as usize;
                if *labels == 0 {
                    Cell::Null // no labels in the table map: mysql-replication gives None
                } else if idx >= *labels {
                    return unsupported(format!("column {i}: an ENUM index beyond its labels"));
                } else {
                    Cell::Label(idx)
                }
            }
            Col::Set { size, members, known } => {
                let mask = rd.le(*size)?;
                if *known {
                    for (bit, label) in members {
                        if mask & (1u64 << bit) != 0 {
                            if s.len() > at0 {
                                s.push(',');
                            }
                            s.push_str(label);
                        }
                    }
                }
                Cell::Text(at0, s.len())
            }
        })
    }

    fn build<'py>(
        &self,
        py: Python<'py>,
        buf: &[u8],
        scratch: &str,
        cells: &[Cell],
        kind: u8,
        images: usize,
    ) -> PyResult<Bound<'py, PyList>> {
        let n = self.cols.len();
        let per_row = n * images;
        let rows = cells.len().checked_div(per_row).unwrap_or(0);
        let out = PyList::empty(py);
        let none = py.None();
        for r in 0..rows {
            let mut dicts = Vec::with_capacity(2);
            for img in 0..images {
                let base = r * per_row + img * n;
                let dict = self.template.bind(py).copy()?;
                for (c, cell) in cells[base..base + n].iter().enumerate() {
                    let value = self.object(py, buf, scratch, c, cell)?;
                    dict.set_item(self.names[c].bind(py), value)?;
                }
                dicts.push(dict.into_any());
            }
            let pair = match kind {
                0 => PyTuple::new(py, [none.bind(py).clone(), dicts.pop().unwrap()])?,
                1 => PyTuple::new(py, [dicts.pop().unwrap(), none.bind(py).clone()])?,
                _ => PyTuple::new(py, dicts)?,
            };
            out.append(pair)?;
        }
        Ok(out)
    }

    fn object<'py>(
        &self,
        py: Python<'py>,
        buf: &[u8],
        scratch: &str,
        c: usize,
        cell: &Cell,
    ) -> PyResult<Bound<'py, PyAny>> {
        Ok(match cell {
            Cell::Null => py.None().into_bound(py),
            Cell::I(v) => v.into_pyobject(py)?.into_any(),
            Cell::U(v) => v.into_pyobject(py)?.into_any(),
            Cell::F(v) => v.into_pyobject(py)?.into_any(),
            // SAFETY: validated as UTF-8 in phase 1.
            Cell::Utf8(at, len) => {
                PyString::new(py, unsafe { std::str::from_utf8_unchecked(&buf[*at..*at + len]) }).into_any()
            }
            Cell::Codec(at, len) => self.codec_text(py, buf, c, *at, *len)?.into_any(),
            Cell::Json(at, len) => {
                let text = PyString::new(py, unsafe { std::str::from_utf8_unchecked(&buf[*at..*at + len]) });
                self.json(py, c, text.into_any())?
            }
            Cell::JsonCodec(at, len) => {
                let text = self.codec_text(py, buf, c, *at, *len)?;
                self.json(py, c, text.into_any())?
            }
            Cell::JsonText(a, b) => self.json(py, c, PyString::new(py, &scratch[*a..*b]).into_any())?,
            Cell::Text(a, b) => PyString::new(py, &scratch[*a..*b]).into_any(),
            Cell::B64(a, b) => {
                let d = PyDict::new(py);
                d.set_item(self.b64_key.bind(py), PyString::new(py, &scratch[*a..*b]))?;
                d.into_any()
            }
            Cell::Label(idx) => self.labels[c][*idx].bind(py).clone().into_any(),
        })
    }

    /// bytes.decode(codec) without making the bytes object (a column in latin1, ...).
    fn codec_text<'py>(
        &self,
        py: Python<'py>,
        buf: &[u8],
        c: usize,
        at: usize,
        len: usize,
    ) -> PyResult<Bound<'py, PyAny>> {
        let codec = self.codecs[c].as_ref().expect("a codec column");
        // SAFETY: the pointer and length lie inside `buf`, which outlives the call.
        let obj = unsafe {
            ffi::PyUnicode_Decode(
                buf[at..].as_ptr().cast(),
                len as ffi::Py_ssize_t,
                codec.as_ptr(),
                c"strict".as_ptr(),
            )
        };
        if obj.is_null() {
            drop(PyErr::fetch(py)); // its message would quote the value
            return Err(Unsupported::new_err(format!(
                "column {c}: a value its character set cannot decode"
            )));
        }
        // SAFETY: a new reference returned by PyUnicode_Decode.
        Ok(unsafe { Bound::from_owned_ptr(py, obj) })
    }

    /// The value json.loads gives (mysql_values.py's canonical JSON value). orjson.loads is
    /// the same but several times faster, except that it reads an integer beyond 64 bits as a
    /// float and refuses what is not strict JSON: a text with 19 digits in a row, or one orjson
    /// refuses, goes to json.loads.
    fn json<'py>(&self, py: Python<'py>, c: usize, text: Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let text = text.downcast_into::<PyString>()?;
        loads_json(py, self.orjson_loads.as_ref(), &self.json_loads, text)
            .map_err(|_| Unsupported::new_err(format!("column {c}: a value that is not JSON")))
    }
}

/// Undefined bytes of a single-byte table (Python's charmap codecs use the same marker).
const UNDEFINED: char = '\u{FFFE}';

/// A single-byte character set: the character of each byte.
struct ByteTable {
    chars: Vec<char>,
    ascii: bool, // bytes below 0x80 are themselves
}

impl ByteTable {
    /// `raw` decoded, appended to `out`: Some(true) when it is ASCII the table maps to itself
    /// (nothing appended: the bytes are the text), None when a byte is undefined in the
    /// character set.
    fn text(&self, raw: &[u8], out: &mut String) -> Option<bool> {
        if self.ascii && raw.is_ascii() {
            return Some(true);
        }
        let at = out.len();
        for &b in raw {
            let ch = self.chars[b as usize];
            if ch == UNDEFINED {
                out.truncate(at);
                return None;
            }
            out.push(ch);
        }
        Some(false)
    }
}

/// json.loads(text), through orjson.loads when it gives the same value (see Plan::json).
pub(crate) fn loads_json<'py>(
    py: Python<'py>,
    fast: Option<&Py<PyAny>>,
    slow: &Py<PyAny>,
    text: Bound<'py, PyString>,
) -> PyResult<Bound<'py, PyAny>> {
    if let Some(fast) = fast {
        if !long_digit_run(text.to_str()?.as_bytes()) {
            if let Ok(v) = fast.bind(py).call1((&text,)) {
                return Ok(v);
            }
        }
    }
    slow.bind(py).call1((text,))
}

/// Whether `s` has 19 or more ASCII digits in a row (an integer that may not fit 64 bits).
fn long_digit_run(s: &[u8]) -> bool {
    let mut run = 0;
    for &b in s {
        if b.is_ascii_digit() {
            run += 1;
            if run >= 19 {
                return true;
            }
        } else {
            run = 0;
        }
    }
    false
}

/// The fractional seconds that follow DATETIME2/TIMESTAMP2/TIME2, in microseconds, read as
/// mysql-replication reads them (a signed big-endian number of 1-3 bytes).
fn fraction(rd: &mut Rd<'_>, fsp: u32) -> R<i64> {
    let n = match fsp {
        1 | 2 => 1,
        3 | 4 => 2,
        5 | 6 => 3,
        _ => return Ok(0),
    };
    let mut v = rd.be_signed(n)?;
    if fsp % 2 == 1 {
        v /= 10; // truncates toward zero, like int(v / 10)
    }
    Ok(v * 10i64.pow(6 - fsp))
}

/// MySQL's packed DECIMAL as plain text with the column's scale ('-12.30', '0.5', '7'),
/// appended to `out`.
fn decimal(rd: &mut Rd<'_>, precision: usize, scale: usize, out: &mut String) -> R<()> {
    let integral = precision - scale;
    let (int_full, int_rest) = (integral / 9, integral % 9);
    let (frac_full, frac_rest) = (scale / 9, scale % 9);
    let size = DIG2BYTES[int_rest] + 4 * int_full + 4 * frac_full + DIG2BYTES[frac_rest];
    let mut packed = [0u8; 32]; // DECIMAL(65, s) packs into 30 bytes at most
    packed[..size].copy_from_slice(rd.take(size)?);
    let b = &mut packed[..size];
    let negative = b[0] & 0x80 == 0;
    b[0] ^= 0x80;
    if negative {
        b.iter_mut().for_each(|x| *x = !*x);
    }
    let mut pos = 0usize;
    let mut group = |n: usize| {
        let v = b[pos..pos + n].iter().fold(0u64, |acc, &x| (acc << 8) | x as u64);
        pos += n;
        v
    };
    if negative {
        out.push('-');
    }
    let digits = out.len();
    if int_rest > 0 {
        push_digits(out, group(DIG2BYTES[int_rest]), 0);
    }
    for _ in 0..int_full {
        push_digits(out, group(4), 9);
    }
    let zeros = out.as_bytes()[digits..].iter().take_while(|&&c| c == b'0').count();
    if zeros == out.len() - digits {
        out.truncate(digits);
        out.push('0');
    } else if zeros > 0 {
        out.drain(digits..digits + zeros);
    }
    if scale > 0 {
        out.push('.');
        for _ in 0..frac_full {
            push_digits(out, group(4), 9);
        }
        if frac_rest > 0 {
            push_digits(out, group(DIG2BYTES[frac_rest]), frac_rest);
        }
    }
    Ok(())
}

#[pymodule]
fn _rows_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Plan>()?;
    m.add_class::<pgoutput::PgRowPlan>()?;
    m.add_class::<mysql_text::MyTextPlan>()?;
    m.add_class::<mysql_result::MyRowsReader>()?;
    m.add_class::<pq_stream::PqStream>()?;
    m.add_class::<pq_copy::PqCopy>()?;
    m.add_function(wrap_pyfunction!(murmur2::murmur2_partitions, m)?)?;
    m.add("RowsDecodeError", m.py().get_type::<RowsDecodeError>())?;
    m.add("Unsupported", m.py().get_type::<Unsupported>())?;
    Ok(())
}
