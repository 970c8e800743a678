//! Optimisers, schedules and parameter averaging.
