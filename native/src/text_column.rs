//! A chunk's texts (row images, keys) written one after the other into the buffers of Arrow
//! string arrays: one data buffer and its 32-bit offsets, no Python string per row.
//!
//! Python wraps them without a copy (`pa.Array.from_buffers`, core/text_column.py) and the
//! Delta output writes them as the changelog's column. A piece holds at most 2 GiB of text
//! (the offsets are 32-bit); a chunk with more continues in a next piece.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

const PIECE_MAX: usize = i32::MAX as usize;

pub(crate) struct TextColumn {
    limit: usize,                 // the most text a piece holds
    done: Vec<(Vec<u8>, String)>, // finished pieces: offsets (native i32s), data
    offsets: Vec<u8>,
    data: String,
}

impl TextColumn {
    pub(crate) fn new() -> Self {
        Self::with_limit(PIECE_MAX)
    }

    fn with_limit(limit: usize) -> Self {
        TextColumn {
            limit,
            done: Vec::new(),
            offsets: 0i32.to_ne_bytes().to_vec(),
            data: String::new(),
        }
    }

    /// Where the next text is written; `end_text` ends it.
    pub(crate) fn buf(&mut self) -> &mut String {
        &mut self.data
    }

    /// Ends the text written into `buf` since the last call.
    pub(crate) fn end_text(&mut self) -> Result<(), String> {
        if self.data.len() > self.limit {
            let start = i32::from_ne_bytes(self.offsets[self.offsets.len() - 4..].try_into().expect("4 bytes"));
            let text = self.data.split_off(start as usize);
            if text.len() > self.limit {
                return Err("a row text over 2 GiB".into());
            }
            let piece = (
                std::mem::replace(&mut self.offsets, 0i32.to_ne_bytes().to_vec()),
                std::mem::take(&mut self.data),
            );
            self.done.push(piece);
            self.data = text;
        }
        self.offsets.extend_from_slice(&(self.data.len() as i32).to_ne_bytes());
        Ok(())
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.done.iter().map(|(o, _)| o.len() / 4 - 1).sum::<usize>() + self.offsets.len() / 4 - 1
    }

    /// The pieces as `[(n, offsets, data), ...]` (bytes); the column is empty afterwards.
    pub(crate) fn take_py<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let last = (
            std::mem::replace(&mut self.offsets, 0i32.to_ne_bytes().to_vec()),
            std::mem::take(&mut self.data),
        );
        let pieces = PyList::empty(py);
        for (offsets, data) in std::mem::take(&mut self.done).into_iter().chain(std::iter::once(last)) {
            let n = offsets.len() / 4 - 1;
            if n == 0 && !pieces.is_empty() {
                continue;
            }
            pieces.append((n, PyBytes::new(py, &offsets), PyBytes::new(py, data.as_bytes())))?;
        }
        Ok(pieces)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_end_at_their_offsets() {
        let mut c = TextColumn::new();
        c.buf().push_str("{\"a\":1}");
        c.end_text().unwrap();
        c.end_text().unwrap(); // an empty text
        c.buf().push_str("[2]");
        c.end_text().unwrap();
        assert_eq!(c.len(), 3);
        let offs: Vec<i32> = c
            .offsets
            .chunks(4)
            .map(|b| i32::from_ne_bytes(b.try_into().unwrap()))
            .collect();
        assert_eq!(offs, vec![0, 7, 7, 10]);
        assert_eq!(c.data, "{\"a\":1}[2]");
    }

    #[test]
    fn a_full_piece_is_followed_by_another() {
        let mut c = TextColumn::with_limit(8);
        for t in ["abc", "defg", "hi", "j"] {
            c.buf().push_str(t);
            c.end_text().unwrap();
        }
        assert_eq!(c.len(), 4);
        assert_eq!(c.done.len(), 1);
        assert_eq!(c.done[0].1, "abcdefg");
        assert_eq!(c.data, "hij");
        c.buf().push_str("0123456789");
        assert!(c.end_text().is_err());
    }
}
