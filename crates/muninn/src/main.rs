//! The muninn command line (being written).
fn main() {}
