//! The decisions fed back through `ObjectStore` (kvrs-decide-test-support): each plan is applied
//! to the objects it was decided from, and the result is the next snapshot. These are integration
//! tests rather than unit tests because the store is its own crate built on kvrs-decide's public
//! API — a unit test would see two kvrs-decides, the one under test and the store's.

mod vm;
mod vmi;
