//! Reading a logical replication stream's CopyData messages in batches, outside the GIL.
//!
//! psycopg2's `read_message` returns one message per call, makes an object for each, and
//! reads the socket (a `recv` and, over TLS, a decryption) with the GIL held whenever libpq
//! holds no whole message: about every change at capture rates, while the writer thread waits
//! for the GIL. `PqStream.read` takes every message libpq can give without waiting, through the
//! same `PGconn` psycopg2 opened (`connection.pgconn_ptr`), and calls libpq's functions from
//! the very library psycopg2 is linked with (looked up by path, never loaded anew).
//!
//! It hands back the XLogData payloads and what the keepalives said; replying to keepalives,
//! sending status updates and raising errors as psycopg2's exceptions stay in Python
//! (sources/postgres/pq_stream.py).

use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};
use std::ffi::{CStr, CString};
use std::os::raw::{c_char, c_int, c_void};

pub(crate) type Conn = *mut c_void;
pub(crate) type Res = *mut c_void;

pub(crate) struct LibPq {
    pub(crate) send_query: unsafe extern "C" fn(Conn, *const c_char) -> c_int,
    pub(crate) get_copy_data: unsafe extern "C" fn(Conn, *mut *mut c_char, c_int) -> c_int,
    pub(crate) consume_input: unsafe extern "C" fn(Conn) -> c_int,
    pub(crate) freemem: unsafe extern "C" fn(*mut c_void),
    pub(crate) get_result: unsafe extern "C" fn(Conn) -> Res,
    pub(crate) result_status: unsafe extern "C" fn(Res) -> c_int,
    pub(crate) result_error_field: unsafe extern "C" fn(Res, c_int) -> *const c_char,
    pub(crate) result_error_message: unsafe extern "C" fn(Res) -> *const c_char,
    pub(crate) clear: unsafe extern "C" fn(Res),
    pub(crate) error_message: unsafe extern "C" fn(Conn) -> *const c_char,
    pub(crate) status: unsafe extern "C" fn(Conn) -> c_int,
    pub(crate) lib_version: unsafe extern "C" fn() -> c_int,
}

pub(crate) const PGRES_COPY_OUT: c_int = 3; // ExecStatusType in libpq-fe.h
const PGRES_FATAL_ERROR: c_int = 7;
pub(crate) const CONNECTION_BAD: c_int = 1; // ConnStatusType
const PG_DIAG_SQLSTATE: c_int = b'C' as c_int;
const XLOG_HEADER: usize = 1 + 8 + 8 + 8; // 'w', dataStart, walEnd, sendTime
const KEEPALIVE_LEN: usize = 1 + 8 + 8 + 1; // 'k', walEnd, sendTime, replyRequested

/// libpq's function `name` as `F`.
///
/// # Safety
/// `F` must be the C signature of that function.
unsafe fn symbol<F: Copy>(handle: *mut c_void, name: &str) -> PyResult<F> {
    let c = CString::new(name).expect("no NUL in a symbol name");
    let p = libc::dlsym(handle, c.as_ptr());
    if p.is_null() {
        return Err(PyOSError::new_err(format!("libpq has no {name}")));
    }
    assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<*mut c_void>());
    Ok(std::mem::transmute_copy::<*mut c_void, F>(&p))
}

fn text(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: libpq returns NUL-terminated strings that live until the next call on them.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

fn be64(b: &[u8]) -> u64 {
    u64::from_be_bytes(b[..8].try_into().expect("8 bytes"))
}

/// How a read ended other than by running out of buffered messages.
enum End {
    /// The COPY ended (-1): the server's error, if it sent one, as (SQLSTATE, message).
    Copy(Option<(String, String)>),
    /// libpq failed (-2, or a failed read): its message and whether the connection is gone.
    Broken(String, bool),
    /// A message this reader does not know: its type byte.
    Unknown(u8),
}

struct Batch {
    data: Vec<u8>,
    bounds: Vec<(usize, usize)>,
    data_start: u64,
    wal_end: u64,
    reply: bool,
    end: Option<End>,
}

impl LibPq {
    /// The libpq already loaded at `path` (the one psycopg2 is linked with); never loads it.
    pub(crate) fn open(path: &str) -> PyResult<LibPq> {
        let c = CString::new(path).map_err(|_| PyOSError::new_err("a NUL in the libpq path"))?;
        // SAFETY: RTLD_NOLOAD only returns a handle to a library already in the process.
        let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
        if handle.is_null() {
            return Err(PyOSError::new_err(format!("{path} is not loaded in this process")));
        }
        // SAFETY: each symbol is libpq's function of that name, with the C signature above.
        unsafe {
            Ok(LibPq {
                send_query: symbol(handle, "PQsendQuery")?,
                get_copy_data: symbol(handle, "PQgetCopyData")?,
                consume_input: symbol(handle, "PQconsumeInput")?,
                freemem: symbol(handle, "PQfreemem")?,
                get_result: symbol(handle, "PQgetResult")?,
                result_status: symbol(handle, "PQresultStatus")?,
                result_error_field: symbol(handle, "PQresultErrorField")?,
                result_error_message: symbol(handle, "PQresultErrorMessage")?,
                clear: symbol(handle, "PQclear")?,
                error_message: symbol(handle, "PQerrorMessage")?,
                status: symbol(handle, "PQstatus")?,
                lib_version: symbol(handle, "PQlibVersion")?,
            })
        }
    }

    /// libpq's error message for `conn` and whether the connection is gone.
    pub(crate) fn broken(&self, conn: Conn) -> (String, bool) {
        // SAFETY: a PGconn; libpq's message lives until the next call on it.
        unsafe { (text((self.error_message)(conn)), (self.status)(conn) == CONNECTION_BAD) }
    }

    /// The results that follow the end of a COPY (or a failed query): the first error's
    /// SQLSTATE and message; reads them all, so that the connection is idle again.
    pub(crate) fn results_error(&self, conn: Conn) -> Option<(String, String)> {
        let mut error = None;
        loop {
            // SAFETY: a PGconn whose COPY ended; each result is cleared once.
            let res = unsafe { (self.get_result)(conn) };
            if res.is_null() {
                return error;
            }
            if error.is_none() {
                error = self.result_error(res);
            }
            // SAFETY: a result of this connection, cleared once.
            unsafe { (self.clear)(res) };
        }
    }

    /// A failed result's SQLSTATE and message; None for any other result.
    pub(crate) fn result_error(&self, res: Res) -> Option<(String, String)> {
        // SAFETY: a live result; libpq's strings live until it is cleared.
        unsafe {
            ((self.result_status)(res) == PGRES_FATAL_ERROR).then(|| {
                (
                    text((self.result_error_field)(res, PG_DIAG_SQLSTATE)),
                    text((self.result_error_message)(res)),
                )
            })
        }
    }
}

#[pyclass(frozen)]
pub struct PqStream {
    lib: LibPq,
}

// SAFETY: function pointers into a library that stays loaded (psycopg2 keeps it).
unsafe impl Send for PqStream {}
unsafe impl Sync for PqStream {}

impl PqStream {
    fn read_batch(&self, conn: Conn, max_messages: usize, max_bytes: usize) -> Batch {
        let lib = &self.lib;
        let mut b = Batch {
            data: Vec::new(),
            bounds: Vec::new(),
            data_start: 0,
            wal_end: 0,
            reply: false,
            end: None,
        };
        let mut consumed = false; // the socket was read since the last message
        while b.bounds.len() < max_messages && b.data.len() < max_bytes {
            let mut buf: *mut c_char = std::ptr::null_mut();
            // SAFETY: a live PGconn in COPY BOTH mode, used by this thread alone; async read.
            let n = unsafe { (lib.get_copy_data)(conn, &mut buf, 1) };
            if n > 0 {
                consumed = false;
                // SAFETY: libpq returns n bytes at buf, freed below.
                let msg = unsafe { std::slice::from_raw_parts(buf as *const u8, n as usize) };
                match msg[0] {
                    b'w' if msg.len() >= XLOG_HEADER => {
                        b.data_start = b.data_start.max(be64(&msg[1..]));
                        b.wal_end = b.wal_end.max(be64(&msg[9..]));
                        let at = b.data.len();
                        b.data.extend_from_slice(&msg[XLOG_HEADER..]);
                        b.bounds.push((at, b.data.len()));
                    }
                    b'k' if msg.len() >= KEEPALIVE_LEN => {
                        b.wal_end = b.wal_end.max(be64(&msg[1..]));
                        b.reply |= msg[17] != 0;
                    }
                    other => b.end = Some(End::Unknown(other)),
                }
                // SAFETY: buf came from PQgetCopyData.
                unsafe { (lib.freemem)(buf as *mut c_void) };
                if b.end.is_some() {
                    break;
                }
            } else if n == 0 {
                if consumed {
                    break; // nothing more without waiting
                }
                // SAFETY: as above.
                if unsafe { (lib.consume_input)(conn) } == 0 {
                    b.end = Some(self.broken(conn));
                    break;
                }
                consumed = true;
            } else if n == -1 {
                b.end = Some(End::Copy(self.lib.results_error(conn)));
                break;
            } else {
                b.end = Some(self.broken(conn));
                break;
            }
        }
        b
    }

    fn broken(&self, conn: Conn) -> End {
        let (message, bad) = self.lib.broken(conn);
        End::Broken(message, bad)
    }
}

#[pymethods]
impl PqStream {
    /// The libpq already loaded at `path` (the one psycopg2 is linked with); never loads it.
    #[new]
    fn new(path: &str) -> PyResult<Self> {
        Ok(PqStream {
            lib: LibPq::open(path)?,
        })
    }

    fn lib_version(&self) -> i32 {
        // SAFETY: takes no arguments.
        unsafe { (self.lib.lib_version)() }
    }

    /// Every message libpq has or can read without waiting, up to `max_messages` payloads or
    /// about `max_bytes`: `(payloads, highest dataStart, highest walEnd, a keepalive asked for
    /// a reply, end)`. `end` is None, or `("copy", sqlstate, message)` when the COPY ended
    /// (sqlstate and message empty without an error), `("broken", message, connection_bad)`,
    /// or `("unknown", type_byte, "")`. `conn` is the connection's `pgconn_ptr`: no other
    /// thread may use that connection during the call (the GIL is released meanwhile).
    fn read<'py>(
        &self,
        py: Python<'py>,
        conn: usize,
        max_messages: usize,
        max_bytes: usize,
    ) -> PyResult<(Bound<'py, PyList>, u64, u64, bool, PyObject)> {
        if conn == 0 {
            return Err(PyOSError::new_err("the replication connection is closed"));
        }
        let b = py.allow_threads(|| self.read_batch(conn as Conn, max_messages, max_bytes));
        let payloads = PyList::new(py, b.bounds.iter().map(|&(s, e)| PyBytes::new(py, &b.data[s..e])))?;
        let end: PyObject = match b.end {
            None => py.None(),
            Some(End::Copy(e)) => {
                let (state, message) = e.unwrap_or_default();
                ("copy", state, message).into_pyobject(py)?.into_any().unbind()
            }
            Some(End::Broken(message, bad)) => ("broken", message, bad).into_pyobject(py)?.into_any().unbind(),
            Some(End::Unknown(t)) => ("unknown", t, "").into_pyobject(py)?.into_any().unbind(),
        };
        Ok((payloads, b.data_start, b.wal_end, b.reply, end))
    }
}
