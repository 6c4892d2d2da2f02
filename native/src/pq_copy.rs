//! A dump chunk read by `COPY (SELECT ...) TO STDOUT` straight into the changelog's row texts.
//!
//! psycopg2 makes a tuple of strings per row of a SELECT; the source then makes each a dict of
//! canonical values, and orjson its JSON text (core/row_text.py): three Python objects per row,
//! all with the GIL held. Here libpq runs the COPY on psycopg2's own connection, with the GIL
//! released, and each row's text fields go through the log decoder's value rules
//! (pgoutput::PgRowPlan, the same text the log carries) into the JSON text. Python gets the
//! texts and the key tuples only, a part at a time, so that the writer thread runs meanwhile.
//!
//! The transaction around it (snapshot, xid), the SQL and the fallback stay in Python
//! (sources/postgres/chunk_copy.py).

use crate::pgoutput::PgRowPlan;
use crate::pq_stream::{Conn, LibPq, PGRES_COPY_OUT};
use crate::text_column::TextColumn;
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};
use std::borrow::Cow;
use std::ffi::CString;
use std::os::raw::{c_char, c_void};

/// How a COPY ended, other than with all its rows read.
enum End {
    /// The server's error: (SQLSTATE, message).
    Error(String, String),
    /// libpq failed: its message and whether the connection is gone.
    Broken(String, bool),
    /// A value the decoder does not write exactly as the Python path would: why.
    Unsupported(String),
}

/// Rows read between two visits to Python: their keys' texts (their JSON texts go to the
/// chunk's `Texts`).
struct Part {
    keys: Vec<Vec<Option<Vec<u8>>>>,
    done: bool,
}

/// The chunk's row texts and key texts (JSON arrays, as the changelog's key column holds).
struct Texts {
    rows: TextColumn,
    keys: TextColumn,
}

/// One COPY text field with its escapes undone (COPY TO writes `\\`, `\b`, `\f`, `\n`, `\r`,
/// `\t`, `\v`; octal and hex forms are read too, as COPY FROM reads them).
fn unescape(f: &[u8]) -> Result<Vec<u8>, String> {
    let mut v = Vec::with_capacity(f.len());
    let mut i = 0;
    while i < f.len() {
        let b = f[i];
        i += 1;
        if b != b'\\' {
            v.push(b);
            continue;
        }
        let c = *f.get(i).ok_or("a COPY field ends in a backslash")?;
        i += 1;
        match c {
            b'b' => v.push(8),
            b'f' => v.push(12),
            b'n' => v.push(b'\n'),
            b'r' => v.push(b'\r'),
            b't' => v.push(b'\t'),
            b'v' => v.push(11),
            b'0'..=b'7' => {
                let mut val = u32::from(c - b'0');
                while i < f.len() && (b'0'..=b'7').contains(&f[i]) && val < 0o40 {
                    val = val * 8 + u32::from(f[i] - b'0');
                    i += 1;
                }
                v.push(val as u8);
            }
            b'x' if f.get(i).is_some_and(u8::is_ascii_hexdigit) => {
                let mut val = 0u8;
                let mut n = 0;
                while n < 2 && f.get(i).is_some_and(u8::is_ascii_hexdigit) {
                    val = val * 16 + (f[i] as char).to_digit(16).expect("a hex digit") as u8;
                    i += 1;
                    n += 1;
                }
                v.push(val);
            }
            other => v.push(other),
        }
    }
    Ok(v)
}

/// A COPY text row (without its newline) as its fields: None for `\N`, borrowed where no escape.
pub(crate) fn fields(line: &[u8]) -> Result<Vec<Option<Cow<'_, [u8]>>>, String> {
    let mut out = Vec::with_capacity(32);
    let escaped = line.contains(&b'\\'); // one scan for the row: most rows have no escape
    for f in line.split(|&b| b == b'\t') {
        out.push(if f == b"\\N" {
            None
        } else if escaped && f.contains(&b'\\') {
            Some(Cow::Owned(unescape(f)?))
        } else {
            Some(Cow::Borrowed(f))
        });
    }
    Ok(out)
}

/// `PqCopy.rows`' answer: (key tuples, row text pieces, key text pieces, end).
type CopiedRows<'py> = (Bound<'py, PyList>, Bound<'py, PyList>, Bound<'py, PyList>, PyObject);

#[pyclass(frozen)]
pub struct PqCopy {
    lib: LibPq,
}

impl PqCopy {
    /// Sends the query and waits for its first result: the COPY's start, or its failure.
    fn start(&self, conn: Conn, sql: &CString) -> Option<End> {
        let lib = &self.lib;
        // SAFETY: a live PGconn used by this thread alone, idle (psycopg2 left no result).
        if unsafe { (lib.send_query)(conn, sql.as_ptr()) } == 0 {
            let (message, bad) = lib.broken(conn);
            return Some(End::Broken(message, bad));
        }
        // SAFETY: as above; the result is cleared once.
        let res = unsafe { (lib.get_result)(conn) };
        if res.is_null() {
            let (message, bad) = lib.broken(conn);
            return Some(End::Broken(message, bad));
        }
        let status = unsafe { (lib.result_status)(res) };
        let error = if let Some((state, message)) = lib.result_error(res) {
            Some(End::Error(state, message))
        } else if status != PGRES_COPY_OUT {
            Some(End::Broken(format!("COPY started with result status {status}"), false))
        } else {
            None
        };
        unsafe { (lib.clear)(res) };
        if error.is_some() {
            lib.results_error(conn); // the connection idle again
        }
        error
    }

    /// Up to `rows` rows (all that are left when `unsupported` is set: then read and dropped).
    fn part(
        &self,
        conn: Conn,
        plan: &PgRowPlan,
        key: &[usize],
        rows: usize,
        texts: &mut Texts,
        end: &mut Option<End>,
    ) -> Part {
        let lib = &self.lib;
        let mut p = Part {
            keys: Vec::with_capacity(rows),
            done: false,
        };
        while end.is_some() || p.keys.len() < rows {
            let mut buf: *mut c_char = std::ptr::null_mut();
            // SAFETY: a PGconn in COPY OUT, used by this thread alone; a blocking read.
            let n = unsafe { (lib.get_copy_data)(conn, &mut buf, 0) };
            if n == -1 {
                if let Some((state, message)) = lib.results_error(conn) {
                    *end = Some(End::Error(state, message)); // the server's error wins
                }
                p.done = true;
                break;
            }
            if n < 0 {
                let (message, bad) = lib.broken(conn);
                *end = Some(End::Broken(message, bad));
                p.done = true;
                break;
            }
            if end.is_none() {
                // SAFETY: libpq returns n bytes at buf, freed below.
                let msg = unsafe { std::slice::from_raw_parts(buf as *const u8, n as usize) };
                if let Err(why) = self.row(plan, key, msg, &mut p, texts) {
                    *end = Some(End::Unsupported(why));
                }
            }
            // SAFETY: buf came from PQgetCopyData.
            unsafe { (lib.freemem)(buf as *mut c_void) };
        }
        p
    }

    fn row(&self, plan: &PgRowPlan, key: &[usize], msg: &[u8], p: &mut Part, texts: &mut Texts) -> Result<(), String> {
        let line = msg.strip_suffix(b"\n").ok_or("a COPY row without its newline")?;
        let f = fields(line)?;
        plan.image_json(texts.rows.buf(), &f)?;
        texts.rows.end_text()?;
        plan.key_json(texts.keys.buf(), key, &f)?;
        texts.keys.end_text()?;
        p.keys
            .push(key.iter().map(|&k| f[k].as_ref().map(|v| v.to_vec())).collect());
        Ok(())
    }
}

#[pymethods]
impl PqCopy {
    /// The libpq already loaded at `path` (psycopg2's); never loads it.
    #[new]
    fn new(path: &str) -> PyResult<Self> {
        Ok(PqCopy {
            lib: LibPq::open(path)?,
        })
    }

    fn lib_version(&self) -> i32 {
        // SAFETY: takes no arguments.
        unsafe { (self.lib.lib_version)() }
    }

    /// Runs `sql` (a `COPY (...) TO STDOUT` in text format, the row's columns in `plan`'s
    /// order) on the connection at `conn` (`pgconn_ptr`) and gives `(keys, texts, key_texts,
    /// end)`: each row's key tuple (the columns at `key`), read `part_rows` at a time with the
    /// GIL released, and the rows' JSON texts and their keys' as Arrow string pieces
    /// `[(n, offsets, data), ...]` (crate::text_column). `end` is None, `("error", sqlstate, message)`, `("broken", message,
    /// connection_bad)` or `("unsupported", reason, "")` (a value only the Python path writes
    /// exactly: read the chunk again that way); the COPY is always read to its end, so the
    /// connection is idle again. No other thread may use the connection meanwhile.
    fn rows<'py>(
        &self,
        py: Python<'py>,
        conn: usize,
        sql: &[u8],
        plan: &PgRowPlan,
        key: Vec<usize>,
        part_rows: usize,
    ) -> PyResult<CopiedRows<'py>> {
        if conn == 0 {
            return Err(PyOSError::new_err("the connection is closed"));
        }
        if key.is_empty() || key.iter().any(|&k| k >= plan.width()) || part_rows == 0 {
            return Err(PyValueError::new_err(
                "key must list columns of the plan; part_rows > 0",
            ));
        }
        let sql = CString::new(sql.to_vec()).map_err(|_| PyValueError::new_err("a NUL in the SQL"))?;
        let keys = PyList::empty(py);
        let mut texts = Texts {
            rows: TextColumn::new(),
            keys: TextColumn::new(),
        };
        let mut end = py.allow_threads(|| self.start(conn as Conn, &sql));
        if end.is_none() {
            loop {
                let p = py.allow_threads(|| self.part(conn as Conn, plan, &key, part_rows, &mut texts, &mut end));
                for raw in &p.keys {
                    let mut values = Vec::with_capacity(raw.len());
                    for (&k, v) in key.iter().zip(raw) {
                        match plan.key_value(py, k, v.as_deref()) {
                            Ok(v) => values.push(v),
                            Err(why) => {
                                end.get_or_insert(End::Unsupported(why));
                                break;
                            }
                        }
                    }
                    if end.is_some() {
                        break;
                    }
                    keys.append(PyTuple::new(py, values)?)?;
                }
                if p.done {
                    break;
                }
                if end.is_some() {
                    // Read the rest to leave the connection idle.
                    py.allow_threads(|| self.part(conn as Conn, plan, &key, part_rows, &mut texts, &mut end));
                    break;
                }
            }
        }
        let end: PyObject = match end {
            None => py.None(),
            Some(End::Error(state, message)) => ("error", state, message).into_pyobject(py)?.into_any().unbind(),
            Some(End::Broken(message, bad)) => ("broken", message, bad).into_pyobject(py)?.into_any().unbind(),
            Some(End::Unsupported(why)) => ("unsupported", why, "").into_pyobject(py)?.into_any().unbind(),
        };
        Ok((keys, texts.rows.take_py(py)?, texts.keys.take_py(py)?, end))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(line: &[u8]) -> Vec<Option<Vec<u8>>> {
        fields(line)
            .unwrap()
            .into_iter()
            .map(|v| v.map(|c| c.into_owned()))
            .collect()
    }

    #[test]
    fn fields_undo_copy_escapes() {
        assert_eq!(
            f(b"1\t\\N\ta\\tb\\\\c\\nd"),
            vec![Some(b"1".to_vec()), None, Some(b"a\tb\\c\nd".to_vec())]
        );
        assert_eq!(
            f(b"\\b\\f\\r\\v\\101\\x41\\q"),
            vec![Some(b"\x08\x0c\r\x0bAAq".to_vec())]
        );
        assert_eq!(f(b"\\\\N\t"), vec![Some(b"\\N".to_vec()), Some(b"".to_vec())]);
        assert!(fields(b"a\\").is_err());
    }
}
