//! What the platform keeps per tenant beside its plugins: settings (the rate-limit failure mode), the
//! tenant's admin keys, its own JWT verification keys, and the audit log of every admin change.

pub mod audit;
pub mod jwt_keys;
pub mod keys;
pub mod settings;
