//! Simulator (filled in below).
