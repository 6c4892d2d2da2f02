//! Kafka's partition of a record key: murmur2 (the Java client's `Utils.murmur2`, librdkafka's
//! `murmur2` partitioner) of the key bytes, positive, modulo the partition count. The Kafka
//! output hashes the canonical key text where the record key is another text (Debezium's key
//! object), so that a key's partition is the same in both formats; per record in Python this
//! was a few microseconds (outputs/kafka_format.py `murmur2_partition` is the same function).

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

pub(crate) fn murmur2(key: &[u8]) -> u32 {
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let mut h: u32 = 0x9747_b28c ^ (key.len() as u32);
    let mut chunks = key.chunks_exact(4);
    for c in &mut chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M) ^ k;
    }
    let tail = chunks.remainder();
    if tail.len() >= 3 {
        h ^= (tail[2] as u32) << 16;
    }
    if tail.len() >= 2 {
        h ^= (tail[1] as u32) << 8;
    }
    if !tail.is_empty() {
        h ^= tail[0] as u32;
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h
}

/// The partition of each key (`bytes`) among `counts[i]` partitions.
#[pyfunction]
pub(crate) fn murmur2_partitions(keys: &Bound<'_, PyList>, counts: Vec<u32>) -> PyResult<Vec<u32>> {
    if keys.len() != counts.len() {
        return Err(pyo3::exceptions::PyValueError::new_err("one partition count per key"));
    }
    let mut out = Vec::with_capacity(counts.len());
    for (key, n) in keys.iter().zip(counts) {
        if n == 0 {
            return Err(pyo3::exceptions::PyValueError::new_err("a topic without partitions"));
        }
        let bytes = key.downcast::<PyBytes>()?.as_bytes();
        out.push((murmur2(bytes) & 0x7fff_ffff) % n);
    }
    Ok(out)
}
