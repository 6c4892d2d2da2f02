//! The row packets of a MySQL/MariaDB chunk SELECT (text protocol) read from the bytes of the
//! connection, straight into the changelog's row texts.
//!
//! PyMySQL reads each packet in Python (two reads, a header parse and a sequence check per
//! row), with the GIL held. Here Python hands over what the socket gives, a block at a time
//! (sources/mysql/select_native.py: PyMySQL has read the column definitions); this splits the
//! blocks into packets, checks their sequence numbers as PyMySQL does, and writes each row
//! through `MyTextPlan`'s value rules with the GIL released. It stops at the result's EOF or
//! ERR packet: the connection is then where PyMySQL's own reading would have left it.

use crate::mysql_text::MyTextPlan;
use crate::text_column::TextColumn;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};

const MAX_PAYLOAD: usize = 0xFF_FFFF; // a payload this long continues in the next packet
const MORE_RESULTS: u16 = 0x0008; // SERVER_MORE_RESULTS_EXISTS

enum End {
    /// The EOF packet: (warnings, server status).
    Eof(u16, u16),
    /// The ERR packet's payload (PyMySQL's raise_mysql_exception reads it).
    Err(Vec<u8>),
    /// The bytes do not follow the protocol: why.
    Broken(String),
}

#[pyclass(module = "airflow_provider_dblog._rows_native")]
pub struct MyRowsReader {
    plan: Py<MyTextPlan>,
    key: Vec<usize>,
    buf: Vec<u8>,     // bytes of packets not complete yet
    payload: Vec<u8>, // a payload longer than one packet, so far
    seq: u8,
    texts: TextColumn,               // the rows' JSON texts, all of the result
    key_texts: TextColumn,           // their keys' (JSON arrays)
    keys: Vec<Vec<Option<Vec<u8>>>>, // raw key values not yet taken
    end: Option<End>,
    unsupported: Option<String>,
}

impl MyRowsReader {
    fn consume(&mut self, plan: &MyTextPlan, data: &[u8]) {
        let mut buf = std::mem::take(&mut self.buf);
        buf.extend_from_slice(data);
        let mut at = 0;
        while self.end.is_none() && buf.len() - at >= 4 {
            let h = &buf[at..at + 4];
            let len = h[0] as usize | (h[1] as usize) << 8 | (h[2] as usize) << 16;
            if buf.len() - at - 4 < len {
                break;
            }
            if h[3] != self.seq {
                self.end = Some(End::Broken(format!(
                    "Packet sequence number wrong - got {} expected {}",
                    h[3], self.seq
                )));
                break;
            }
            self.seq = self.seq.wrapping_add(1);
            let piece = &buf[at + 4..at + 4 + len];
            at += 4 + len;
            if len == MAX_PAYLOAD || !self.payload.is_empty() {
                self.payload.extend_from_slice(piece);
                if len == MAX_PAYLOAD {
                    continue;
                }
                let whole = std::mem::take(&mut self.payload);
                self.packet(plan, &whole);
            } else {
                self.packet(plan, piece);
            }
        }
        buf.drain(..at);
        if self.end.is_some() && !buf.is_empty() && !matches!(self.end, Some(End::Broken(_))) {
            self.end = Some(End::Broken("bytes after the end of the result".into()));
        }
        self.buf = buf;
    }

    fn packet(&mut self, plan: &MyTextPlan, d: &[u8]) {
        match d.first() {
            Some(0xFE) if d.len() < 9 => {
                let u16_at = |i: usize| d.get(i..i + 2).map_or(0, |b| u16::from_le_bytes([b[0], b[1]]));
                let (warnings, status) = (u16_at(1), u16_at(3));
                self.end = Some(if status & MORE_RESULTS != 0 {
                    End::Broken("a second result after the chunk's".into())
                } else {
                    End::Eof(warnings, status)
                });
            }
            Some(0xFF) => self.end = Some(End::Err(d.to_vec())),
            _ if self.unsupported.is_some() => {} // read to the end, then the caller selects again
            _ => {
                let written = plan
                    .row_text(d, &self.key, self.texts.buf(), self.key_texts.buf())
                    .and_then(|key| {
                        self.texts.end_text()?;
                        self.key_texts.end_text()?;
                        Ok(key)
                    });
                match written {
                    Ok(key) => self.keys.push(key),
                    Err(why) => self.unsupported = Some(why),
                }
            }
        }
    }
}

#[pymethods]
impl MyRowsReader {
    /// MyRowsReader(plan, key, next_seq): the rows of a result whose column definitions are
    /// read, the key tuples of the columns at `key`; `next_seq` the next packet's number.
    #[new]
    fn new(plan: Py<MyTextPlan>, key: Vec<usize>, next_seq: u8) -> PyResult<Self> {
        if key.is_empty() || key.iter().any(|&k| k >= plan.get().width()) {
            return Err(PyValueError::new_err("key must list columns of the plan"));
        }
        Ok(MyRowsReader {
            plan,
            key,
            buf: Vec::new(),
            payload: Vec::new(),
            seq: next_seq,
            texts: TextColumn::new(),
            key_texts: TextColumn::new(),
            keys: Vec::new(),
            end: None,
            unsupported: None,
        })
    }

    /// Reads `data` (the next bytes from the connection), with the GIL released; True once
    /// the result's last packet is read.
    fn feed(&mut self, py: Python<'_>, data: &Bound<'_, PyBytes>) -> bool {
        let plan = self.plan.clone_ref(py);
        let data = data.as_bytes();
        let this = &mut *self;
        py.allow_threads(|| this.consume(plan.get(), data));
        self.end.is_some()
    }

    /// The key tuples of the rows read since the last call.
    fn take<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let plan = self.plan.get();
        let keys = PyList::empty(py);
        for raw in self.keys.drain(..) {
            let mut values = Vec::with_capacity(raw.len());
            for (&k, v) in self.key.iter().zip(&raw) {
                values.push(match v {
                    None => py.None().into_bound(py),
                    Some(v) => plan.key_value(py, k, v).map_err(crate::Unsupported::new_err)?,
                });
            }
            keys.append(PyTuple::new(py, values)?)?;
        }
        Ok(keys)
    }

    /// The rows' JSON texts and their keys' as Arrow string pieces `[(n, offsets, data), ...]`
    /// (crate::text_column); they leave the reader.
    fn texts<'py>(&mut self, py: Python<'py>) -> PyResult<(Bound<'py, PyList>, Bound<'py, PyList>)> {
        Ok((self.texts.take_py(py)?, self.key_texts.take_py(py)?))
    }

    /// The next packet's sequence number (PyMySQL's `_next_seq_id` after the result).
    #[getter]
    fn next_seq(&self) -> u8 {
        self.seq
    }

    /// None while the result goes on; then `("eof", warnings, server_status, unsupported)`
    /// (`unsupported`: why a row was not written, the texts are then partial: select again
    /// the other way; else None), `("error", err_packet_payload)` or `("broken", why)`.
    fn end(&self, py: Python<'_>) -> PyResult<PyObject> {
        Ok(match &self.end {
            None => py.None(),
            Some(End::Eof(w, s)) => ("eof", *w, *s, self.unsupported.clone())
                .into_pyobject(py)?
                .into_any()
                .unbind(),
            Some(End::Err(d)) => ("error", PyBytes::new(py, d)).into_pyobject(py)?.into_any().unbind(),
            Some(End::Broken(why)) => ("broken", why.clone()).into_pyobject(py)?.into_any().unbind(),
        })
    }
}
