//! What a connection holds only while something is pending: [`Extra`]
//! (bytes of an incomplete frame or request, a fragmented message, output
//! the kernel has not taken yet) and its queued output [`Chunk`]s. A
//! connection (`engine/conn.rs`) keeps them in one box, freed when
//! empty; `crate::engine::ws` fills in a fragmented message. Below both, so that
//! the frame layer needs nothing of the transport.

use std::collections::VecDeque;
use std::sync::Arc;

use throng_protocol::frame::Opcode;
use throng_protocol::Wire;
use throng_pubsub::Broadcast;

/// What a connection holds only while something is pending.
#[derive(Default)]
pub(crate) struct Extra {
    /// Bytes of an incomplete frame or HTTP request.
    pub input: Vec<u8>,
    /// A fragmented message in progress: its opcode and bytes so far.
    pub frag: Option<(Opcode, Vec<u8>)>,
    /// The message in progress is compressed (permessage-deflate).
    pub frag_deflated: bool,
    /// Bytes the kernel has not taken yet.
    pub out: VecDeque<Chunk>,
    pub out_bytes: usize,
    /// Registered for writable events.
    pub want_write: bool,
}

impl Extra {
    pub fn is_empty(&self) -> bool {
        self.input.is_empty() && self.frag.is_none() && self.out.is_empty()
    }
}

/// Queued output.
pub(crate) enum Chunk {
    /// A broadcast frame shared with every other subscriber, from `offset`;
    /// the bool: its compressed frame (permessage-deflate).
    Shared(Arc<Broadcast>, Wire, bool, usize),
    /// Bytes of this connection alone, from `offset`.
    Owned(Vec<u8>, usize),
    /// Text shared with other connections (a presence state), from `offset`.
    Text(Arc<str>, usize),
}

impl Chunk {
    /// Bytes of this connection alone, counted in the outbound budget
    /// (`crate::budget`) until the chunk is dropped.
    pub fn owned(bytes: Vec<u8>) -> Chunk {
        crate::budget::owned_queued(bytes.len());
        Chunk::Owned(bytes, 0)
    }

    pub fn rest(&self) -> &[u8] {
        match self {
            Chunk::Shared(b, wire, z, off) => &b.frame_as(*wire, *z).unwrap_or(&[])[*off..],
            Chunk::Owned(v, off) => &v[*off..],
            Chunk::Text(t, off) => &t.as_bytes()[*off..],
        }
    }

    /// Whether part of it was written already.
    pub fn started(&self) -> bool {
        match self {
            Chunk::Shared(_, _, _, off) | Chunk::Owned(_, off) | Chunk::Text(_, off) => *off > 0,
        }
    }

    pub fn advance(&mut self, n: usize) {
        match self {
            Chunk::Shared(_, _, _, off) | Chunk::Owned(_, off) | Chunk::Text(_, off) => *off += n,
        }
    }
}

impl Drop for Chunk {
    fn drop(&mut self) {
        if let Chunk::Owned(v, _) = self {
            crate::budget::owned_released(v.len());
        }
    }
}
