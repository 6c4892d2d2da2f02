//! A column's value as the text decoders read it (pgoutput's and a chunk's text, MySQL's text
//! protocol), before it becomes the Python object of the canonical row or its changelog JSON
//! text: one enum and one way to each, so that both paths write the same for every decoder.

use crate::{base64, loads_json, push_int, row_json};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyString};

pub(crate) enum Val<'a> {
    Null,
    Bool(bool),
    Int(i64),
    UInt(u64),
    Float(f64),
    Str(&'a str),
    Owned(String), // a timestamp in ISO form, a lower-case uuid, ...
    Bytes(std::borrow::Cow<'a, [u8]>),
    Json(&'a str),
}

/// What the Python side of a value needs: the interned "$b64" key and the JSON readers.
pub(crate) struct PyCtx {
    pub(crate) b64_key: Py<PyString>,
    pub(crate) json_loads: Py<PyAny>,
    pub(crate) orjson_loads: Option<Py<PyAny>>,
}

impl PyCtx {
    pub(crate) fn new(py: Python<'_>) -> PyResult<Self> {
        Ok(PyCtx {
            b64_key: PyString::intern(py, "$b64").unbind(),
            json_loads: py.import("json")?.getattr("loads")?.unbind(),
            orjson_loads: py
                .import("orjson")
                .and_then(|m| m.getattr("loads"))
                .ok()
                .map(Bound::unbind),
        })
    }
}

impl Val<'_> {
    /// The canonical Python object; Err: the message of a JSON text that is not JSON.
    pub(crate) fn to_py<'py>(&self, py: Python<'py>, ctx: &PyCtx) -> Result<Bound<'py, PyAny>, String> {
        let int = |r: Bound<'py, pyo3::types::PyInt>| r.into_any();
        Ok(match self {
            Val::Null => py.None().into_bound(py),
            Val::Bool(v) => PyBool::new(py, *v).to_owned().into_any(),
            Val::Int(v) => int(v.into_pyobject(py).unwrap_or_else(|e| match e {})),
            Val::UInt(v) => int(v.into_pyobject(py).unwrap_or_else(|e| match e {})),
            Val::Float(v) => v.into_pyobject(py).unwrap_or_else(|e| match e {}).into_any(),
            Val::Str(t) => PyString::new(py, t).into_any(),
            Val::Owned(t) => PyString::new(py, t).into_any(),
            Val::Bytes(b) => {
                let d = PyDict::new(py);
                d.set_item(ctx.b64_key.bind(py), base64(b, 0))
                    .map_err(|e| e.to_string())?;
                d.into_any()
            }
            Val::Json(t) => loads_json(py, ctx.orjson_loads.as_ref(), &ctx.json_loads, PyString::new(py, t))
                .map_err(|_| "a value that is not JSON".to_string())?,
        })
    }

    /// As orjson writes `to_py`'s object (crate::row_json); Err: why only Python writes it.
    pub(crate) fn push_json(&self, out: &mut String) -> Result<(), String> {
        match self {
            Val::Null => out.push_str("null"),
            Val::Bool(v) => out.push_str(if *v { "true" } else { "false" }),
            Val::Int(v) => push_int(out, *v),
            Val::UInt(v) => crate::push_digits(out, *v, 0),
            Val::Float(v) => row_json::push_float(out, *v),
            Val::Str(t) => row_json::push_str(out, t),
            Val::Owned(t) => row_json::push_str(out, t),
            Val::Bytes(b) => {
                out.push_str("{\"$b64\":\"");
                crate::base64_into(out, b, 0);
                out.push_str("\"}");
            }
            Val::Json(t) => row_json::push_json_text(out, t)?,
        }
        Ok(())
    }
}

/// A key's JSON array, as orjson writes the key tuple (the changelog's key column): the columns
/// at `key` of a row given as its columns' raw texts (None: NULL), each written by `value`.
pub(crate) fn push_key_json<B: AsRef<[u8]>>(
    out: &mut String,
    key: &[usize],
    raws: &[Option<B>],
    mut value: impl FnMut(&mut String, usize, &[u8]) -> Result<(), String>,
) -> Result<(), String> {
    out.push('[');
    for (i, &k) in key.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        match &raws[k] {
            None => out.push_str("null"),
            Some(raw) => value(out, k, raw.as_ref())?,
        }
    }
    out.push(']');
    Ok(())
}
