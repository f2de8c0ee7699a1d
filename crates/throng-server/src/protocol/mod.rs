//! The wire protocols the engine serves.

pub(crate) mod phoenix;
