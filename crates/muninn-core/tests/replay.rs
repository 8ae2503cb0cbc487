//! Replay engine, policies and the optimum.
