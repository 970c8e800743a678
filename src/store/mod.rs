//! The results store: manifest, per-run summaries and per-step metrics in Parquet.
