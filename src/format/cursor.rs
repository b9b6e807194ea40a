//! A bounds-checked little-endian reader over untrusted bytes. Every failure is a
//! `Corrupt` error naming the file and the absolute offset.

use std::path::Path;

use crate::error::{Error, Result};

pub(crate) struct Cursor<'a, 'p> {
    buf: &'a [u8],
    pos: usize,
    /// Absolute file offset of `buf[0]`, for error messages.
    base: u64,
    path: &'p Path,
}

impl<'a, 'p> Cursor<'a, 'p> {
    pub fn new(buf: &'a [u8], base: u64, path: &'p Path) -> Self {
        Cursor { buf, pos: 0, base, path }
    }

    /// Absolute offset of the next byte.
    pub fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }

    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    pub fn is_empty(&self) -> bool {
        self.pos == self.buf.len()
    }

    pub fn err(&self, what: impl Into<String>) -> Error {
        Error::corrupt(self.path, self.offset(), what)
    }

    pub fn bytes(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(self.err(format!("{what}: needs {n} bytes, {} left", self.remaining())));
        }
        let b = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(b)
    }

    pub fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        let b = self.bytes(N, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(b);
        Ok(a)
    }

    pub fn u8(&mut self, what: &str) -> Result<u8> {
        Ok(self.array::<1>(what)?[0])
    }

    pub fn u16(&mut self, what: &str) -> Result<u16> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }

    pub fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    pub fn u64(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// A `u32 LE` length followed by that many bytes.
    pub fn len_prefixed(&mut self, what: &str) -> Result<&'a [u8]> {
        let at = self.offset();
        let len = self.u32(what)?;
        let len =
            usize::try_from(len).map_err(|_| Error::corrupt(self.path, at, format!("{what}: length")))?;
        if len > self.remaining() {
            return Err(Error::corrupt(
                self.path,
                at,
                format!("{what}: length {len} runs past the end ({} bytes left)", self.remaining()),
            ));
        }
        self.bytes(len, what)
    }

    /// Requires `n` zero bytes (reserved fields).
    pub fn zeros(&mut self, n: usize, what: &str) -> Result<()> {
        let at = self.offset();
        let b = self.bytes(n, what)?;
        if b.iter().any(|&x| x != 0) {
            return Err(Error::corrupt(self.path, at, format!("{what}: reserved bytes must be zero")));
        }
        Ok(())
    }
}
