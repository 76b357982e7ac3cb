//! Forward attention.
pub mod params;
