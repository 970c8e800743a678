//! What a queued run is before it is resolved against a recipe: a recipe name
//! plus overrides. Shared by the CLI (`--trick`, `--set`), the matrix files and
//! the queue. Resolution into a full configuration lives in `recipe`.

use crate::events::RunId;
use serde::{Deserialize, Serialize};

/// One change to a base recipe.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Override {
    /// Turn a trick on or off (its parameters take their defaults unless `Set` follows).
    Trick { key: String, on: bool },
    /// Set a hyperparameter (`epochs`, `batch_size`, `lr`, …) or a trick parameter
    /// (`label_smoothing.alpha`). The value is parsed against the parameter's type.
    Set { key: String, value: String },
}

impl Override {
    /// Parses the `--trick` syntax: `NAME`, `NAME=on` or `NAME=off`.
    pub fn parse_trick(s: &str) -> Result<Override, String> {
        let (key, state) = match s.split_once('=') {
            Some((k, v)) => (k.trim(), v.trim()),
            None => (s.trim(), "on"),
        };
        let on = match state {
            "on" | "true" | "1" => true,
            "off" | "false" | "0" => false,
            other => {
                return Err(format!(
                    "`{s}`: trick state must be on or off, not `{other}`"
                ));
            }
        };
        if key.is_empty() {
            return Err(format!("`{s}`: missing trick name"));
        }
        Ok(Override::Trick {
            key: key.to_string(),
            on,
        })
    }

    /// Parses the `--set` syntax: `KEY=VALUE`.
    pub fn parse_set(s: &str) -> Result<Override, String> {
        match s.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() && !v.trim().is_empty() => Ok(Override::Set {
                key: k.trim().to_string(),
                value: v.trim().to_string(),
            }),
            _ => Err(format!("`{s}`: expected KEY=VALUE, for example epochs=10")),
        }
    }
}

impl std::fmt::Display for Override {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Override::Trick { key, on } => write!(f, "{key}={}", if *on { "on" } else { "off" }),
            Override::Set { key, value } => write!(f, "{key}={value}"),
        }
    }
}

/// One run as the queue holds it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunSpec {
    pub id: RunId,
    pub seed: u64,
    pub recipe: String,
    /// Applied in order on top of the recipe.
    pub overrides: Vec<Override>,
    /// Data set spec (`embedded`, an imported name, a folder or archive path).
    pub data: String,
    /// Target accuracy in [0, 1].
    pub target_acc: f64,
    /// Requested device (`cpu`, `cuda`, `cuda:1`); `None` means the worker's own.
    pub device: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_trick_and_set_syntax() {
        assert_eq!(
            Override::parse_trick("celu").unwrap(),
            Override::Trick {
                key: "celu".into(),
                on: true
            }
        );
        assert_eq!(
            Override::parse_trick("ema=off").unwrap(),
            Override::Trick {
                key: "ema".into(),
                on: false
            }
        );
        assert!(
            Override::parse_trick("ema=maybe")
                .unwrap_err()
                .contains("on or off")
        );
        assert_eq!(
            Override::parse_set("epochs=10").unwrap(),
            Override::Set {
                key: "epochs".into(),
                value: "10".into()
            }
        );
        assert!(Override::parse_set("epochs").is_err());
    }
}
