//! Network layers and architectures.
