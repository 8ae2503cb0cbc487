//! Cache-model rules, one test per rule, and property tests.
