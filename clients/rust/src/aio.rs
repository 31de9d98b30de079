//! The tokio front end.
