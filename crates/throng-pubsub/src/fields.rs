//! Length-prefixed binary fields, as both of this crate's wire formats
//! write them (the backplane's envelope and presence's messages to other
//! nodes): a big-endian `u32` length, then the bytes; numbers big-endian.
//! Each format keeps its own error type and converts [`Truncated`] into it.

/// Writes a length-prefixed field. Lengths past `u32::MAX` cannot occur:
/// the server's largest message is far below 4 GiB.
pub(crate) fn put(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
    out.extend_from_slice(bytes);
}

/// The input ended before a field it announced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Truncated;

/// Reads fields off the front of a message, each checked against what is
/// there.
pub(crate) struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    pub fn new(bytes: &'a [u8]) -> Reader<'a> {
        Reader(bytes)
    }

    /// What has not been read yet.
    pub fn rest(&self) -> &'a [u8] {
        self.0
    }

    pub fn take(&mut self, n: usize) -> Result<&'a [u8], Truncated> {
        if self.0.len() < n {
            return Err(Truncated);
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Ok(head)
    }

    pub fn u8(&mut self) -> Result<u8, Truncated> {
        Ok(self.take(1)?[0])
    }

    pub fn u32(&mut self) -> Result<u32, Truncated> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub fn u64(&mut self) -> Result<u64, Truncated> {
        let b = self.take(8)?;
        Ok(u64::from_be_bytes([
            b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7],
        ]))
    }

    /// A length-prefixed field.
    pub fn field(&mut self) -> Result<&'a [u8], Truncated> {
        let n = self.u32()?;
        self.take(n as usize)
    }
}
