//! Real peers.
