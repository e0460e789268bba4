//! Sandbox placeholder
