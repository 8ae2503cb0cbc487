//! The runtime (being written).
