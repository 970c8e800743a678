//! The worker thread that owns the device and runs the queue.
