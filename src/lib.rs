pub mod adapters;
pub mod application;
pub mod domain;
