//! The persistent run queue.
