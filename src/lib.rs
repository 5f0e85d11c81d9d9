pub mod adapters;
pub mod application;
pub mod config;
pub mod domain;
pub mod startup;
pub mod telemetry;
